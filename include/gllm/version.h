/* libgllm-client's release version, for compile-time checks; gllm_version() gives the run-time one. */
#ifndef GLLM_VERSION_H
#define GLLM_VERSION_H

/*
 * Kept equal to project(VERSION) in CMakeLists.txt: the configure step fails when the two
 * differ. The shared library's SONAME follows its own rule (docs/packaging.md): it is
 * bumped when the ABI breaks, not with every release.
 */
#define GLLM_VERSION_MAJOR 0
#define GLLM_VERSION_MINOR 1
#define GLLM_VERSION_PATCH 0

#define GLLM_VERSION_STR_(x) #x
#define GLLM_VERSION_XSTR_(x) GLLM_VERSION_STR_(x)
#define GLLM_VERSION_STRING                                                         \
    GLLM_VERSION_XSTR_(GLLM_VERSION_MAJOR) "." GLLM_VERSION_XSTR_(GLLM_VERSION_MINOR) "." \
    GLLM_VERSION_XSTR_(GLLM_VERSION_PATCH)

/* One number that orders releases: #if GLLM_VERSION_NUMBER >= GLLM_MAKE_VERSION(0, 2, 0) */
#define GLLM_MAKE_VERSION(major, minor, patch) ((major) * 1000000L + (minor) * 1000L + (patch))
#define GLLM_VERSION_NUMBER \
    GLLM_MAKE_VERSION(GLLM_VERSION_MAJOR, GLLM_VERSION_MINOR, GLLM_VERSION_PATCH)

#endif
