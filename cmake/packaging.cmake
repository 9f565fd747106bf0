# CPack: the Debian packages gllmd, libgllm-client0 and libgllm-client-dev (one per
# install component) and a .tar.gz of the whole install tree. Run from a tree configured
# with -DCMAKE_INSTALL_PREFIX=/usr (`make package` does): the packages hold what
# `cmake --install` puts under that prefix.

if(NOT CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  message(STATUS "gllm: packages built from this tree install under ${CMAKE_INSTALL_PREFIX}; "
                 "Debian packages want -DCMAKE_INSTALL_PREFIX=/usr (make package)")
endif()

find_program(GLLM_DPKG dpkg)
if(GLLM_DPKG)
  execute_process(COMMAND ${GLLM_DPKG} --print-architecture
                  OUTPUT_VARIABLE GLLM_DEB_ARCH OUTPUT_STRIP_TRAILING_WHITESPACE)
else()
  set(GLLM_DEB_ARCH ${CMAKE_SYSTEM_PROCESSOR})
endif()

set(CPACK_PACKAGE_NAME gllm)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "The gllm authors")
set(CPACK_PACKAGE_CONTACT "${GLLM_PACKAGE_MAINTAINER}")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
# Install with DESTDIR, so the unit's ExecStart and gllm.pc name the real prefix rather
# than CPack's staging directory.
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_GENERATOR DEB TGZ)
set(CPACK_OUTPUT_FILE_PREFIX ${PROJECT_BINARY_DIR}/packages)
set(CPACK_COMPONENTS_ALL daemon runtime dev python)

# The archive: one tree, every component, named like the packages.
set(CPACK_ARCHIVE_COMPONENT_INSTALL OFF)
set(CPACK_PACKAGE_FILE_NAME gllm_${PROJECT_VERSION}_${GLLM_DEB_ARCH})

# Debian: one package per component, Debian file names (name_version-release_arch.deb),
# dependencies from dpkg-shlibdeps, a shlibs file for the library.
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE ${GLLM_DEB_ARCH})
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SOURCE gllm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(_v "${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE}")

set(CPACK_DEBIAN_DAEMON_PACKAGE_NAME gllmd)
set(CPACK_DEBIAN_DAEMON_PACKAGE_SECTION misc)
set(CPACK_DEBIAN_DAEMON_PACKAGE_DEPENDS "systemd | systemd-standalone-sysusers")
set(CPACK_DEBIAN_DAEMON_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/cmake/debian/gllmd/postinst
    ${PROJECT_SOURCE_DIR}/cmake/debian/gllmd/prerm
    ${PROJECT_SOURCE_DIR}/cmake/debian/gllmd/postrm)
set(CPACK_DEBIAN_DAEMON_DESCRIPTION
"attention-kernel daemon for LLM serving
gllmd owns the GPUs of a host and serves attention jobs (prefill, decode and
chunked prefill over a paged KV cache, cache appends) to local processes over
a Unix socket, with tensors in shared memory or device memory. Its CUDA
kernels are compiled ahead of time and embedded; without a GPU driver it
serves on the CPU. This package holds gllmd, gllmctl, the systemd units and
the manifest of the embedded kernel images.")

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libgllm-client${GLLM_SOVERSION})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA
    ${PROJECT_SOURCE_DIR}/cmake/debian/libgllm-client0/triggers)
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION
"client library for the gllmd attention-kernel daemon
libgllm-client connects a process to gllmd and submits attention jobs to it,
with tensors in shared-memory arenas or in device memory owned by the daemon.
This package holds the shared library.")

set(CPACK_DEBIAN_DEV_PACKAGE_NAME libgllm-client-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
    "libgllm-client${GLLM_SOVERSION} (= ${_v}), libmsgpack-dev")
set(CPACK_DEBIAN_DEV_DESCRIPTION
"client library for the gllmd attention-kernel daemon (development files)
libgllm-client connects a process to gllmd and submits attention jobs to it.
This package holds the headers, the static library, the pkg-config file and
the CMake package (find_package(gllm), targets gllm::client and
gllm::client_static).")

set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-gllm)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_DEBIAN_PYTHON_PACKAGE_ARCHITECTURE all)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SHLIBDEPS OFF)
# The library is loaded with ctypes, found through ldconfig: the runtime package of this
# version or later (the SONAME policy, docs/packaging.md). numpy for arenas as arrays;
# torch is not in Debian 12.
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
    "python3:any (>= 3.8), libgllm-client${GLLM_SOVERSION} (>= ${_v})")
set(CPACK_DEBIAN_PYTHON_PACKAGE_RECOMMENDS "python3-numpy")
set(CPACK_DEBIAN_PYTHON_DESCRIPTION
"Python client for the gllmd attention-kernel daemon
The gllm package binds libgllm-client with ctypes: numpy arrays over
shared-memory arenas, dense attention, the paged KV cache, and torch tensors
in device memory shared with gllmd, ordered on the caller's CUDA stream.")

include(CPack)
