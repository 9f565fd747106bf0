# What `cmake --install` puts where, split into the components the packages are made of:
# daemon (gllmd), runtime (libgllm-client0), dev (libgllm-client-dev).
# Every destination is relative unless configured otherwise, so `cmake --install --prefix P`
# puts everything under P, and CMAKE_INSTALL_PREFIX=/usr gives the Debian layout.

include(CMakePackageConfigHelpers)

# include/gllm/version.h is what users compile against; project(VERSION) is what the
# build and the packages are called. They may not drift apart.
file(STRINGS ${PROJECT_SOURCE_DIR}/include/gllm/version.h _gllm_version_lines
     REGEX "^#define GLLM_VERSION_(MAJOR|MINOR|PATCH) [0-9]+$")
set(_gllm_header_version "")
foreach(part MAJOR MINOR PATCH)
  string(REGEX MATCH "GLLM_VERSION_${part} ([0-9]+)" _m "${_gllm_version_lines}")
  list(APPEND _gllm_header_version ${CMAKE_MATCH_1})
endforeach()
list(JOIN _gllm_header_version "." _gllm_header_version)
if(NOT _gllm_header_version STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "include/gllm/version.h says ${_gllm_header_version}, project() says "
                      "${PROJECT_VERSION}: change both together")
endif()

# The SONAME's number (docs/packaging.md says when it changes). The Debian runtime package
# is named after it: libgllm-client${GLLM_SOVERSION}.
set(GLLM_SOVERSION 0)
get_target_property(_gllm_so gllm-client SOVERSION)
if(NOT _gllm_so STREQUAL GLLM_SOVERSION)
  message(FATAL_ERROR "gllm-client's SOVERSION (${_gllm_so}) differs from GLLM_SOVERSION "
                      "(${GLLM_SOVERSION}) in cmake/install.cmake")
endif()

# The public functions that proto/common.c implements (gllm_strerror, gllm_version, ...)
# are compiled into the shared library itself: taken from the proto archive they would be
# hidden by --exclude-libs, which is there to keep the proto internals out of the ABI.
target_sources(gllm-client PRIVATE ${PROJECT_SOURCE_DIR}/proto/common.c)
target_compile_definitions(gllm-client PRIVATE GLLM_BUILDING_LIBRARY)
# The source tree's include/ for the build only; installed users get the installed one.
set_target_properties(gllm-client PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "$<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>")

# The static library users link: the client and the codec in one self-contained archive
# (libgllm-client.a), unlike the in-tree gllm-client-static, which leans on gllm_proto.
get_target_property(_gllm_proto_sources gllm_proto SOURCES)
add_library(gllm-client-archive STATIC $<TARGET_OBJECTS:gllm_client_objs> ${_gllm_proto_sources})
target_compile_definitions(gllm-client-archive PRIVATE GLLM_BUILDING_LIBRARY)
target_include_directories(gllm-client-archive
  PRIVATE ${PROJECT_SOURCE_DIR}/proto ${MSGPACK_INCLUDE_DIRS}
  PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>)
target_link_libraries(gllm-client-archive INTERFACE msgpackc m)
set_target_properties(gllm-client-archive PROPERTIES OUTPUT_NAME gllm-client)

# systemd's directories: under the prefix unless configured (a distribution that keeps
# units in /lib/systemd/system sets GLLM_SYSTEMD_UNITDIR=/lib/systemd/system).
set(GLLM_SYSTEMD_UNITDIR "lib/systemd/system" CACHE STRING
    "systemd unit directory (relative: under the install prefix)")
set(GLLM_SYSUSERSDIR "lib/sysusers.d" CACHE STRING
    "sysusers.d directory (relative: under the install prefix)")
set(GLLM_TMPFILESDIR "lib/tmpfiles.d" CACHE STRING
    "tmpfiles.d directory (relative: under the install prefix)")
set(GLLM_DOCDIR_DAEMON "${CMAKE_INSTALL_DATAROOTDIR}/doc/gllmd")
set(GLLM_DOCDIR_RUNTIME "${CMAKE_INSTALL_DATAROOTDIR}/doc/libgllm-client${GLLM_SOVERSION}")
set(GLLM_DOCDIR_DEV "${CMAKE_INSTALL_DATAROOTDIR}/doc/libgllm-client-dev")
set(GLLM_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/gllm")
# The packages' Maintainer: a placeholder unless the release sets it (the cache variable,
# or GLLM_PACKAGE_MAINTAINER in the environment of the first configure).
if(DEFINED ENV{GLLM_PACKAGE_MAINTAINER} AND NOT "$ENV{GLLM_PACKAGE_MAINTAINER}" STREQUAL "")
  set(_gllm_maintainer "$ENV{GLLM_PACKAGE_MAINTAINER}")
else()
  set(_gllm_maintainer "gllm maintainers <maintainers@gllm.invalid>")
endif()
set(GLLM_PACKAGE_MAINTAINER "${_gllm_maintainer}" CACHE STRING
    "Maintainer field of the packages and their changelog.Debian")

# A stripped install (CPack, `cmake --install --strip`) strips as Debian's dh_strip does:
# the archive keeps its symbols, which linking needs, and loses its debug information;
# every ELF file loses the compiler's .comment notes.
function(gllm_strip_more component file)
  install(CODE "
    if(CMAKE_INSTALL_DO_STRIP)
      execute_process(COMMAND \"${CMAKE_STRIP}\" ${ARGN} --remove-section=.comment
        \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${file}\" COMMAND_ERROR_IS_FATAL ANY)
    endif()
  " COMPONENT ${component})
endfunction()

# --- daemon -----------------------------------------------------------------------------
# gllmd is a system daemon, in sbin as Debian puts them; gllmctl is for every user.
install(TARGETS gllmd RUNTIME DESTINATION ${CMAKE_INSTALL_SBINDIR} COMPONENT daemon)
install(TARGETS gllmctl RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT daemon)
gllm_strip_more(daemon ${CMAKE_INSTALL_SBINDIR}/gllmd)
gllm_strip_more(daemon ${CMAKE_INSTALL_BINDIR}/gllmctl)

# The unit's ExecStart is the installed gllmd, which is known only when installing
# (`cmake --install --prefix P`, or CPack's staging), so the unit is written then.
set(_gllm_unit_out ${PROJECT_BINARY_DIR}/systemd/install/gllmd.service)
install(CODE "
  if(IS_ABSOLUTE \"${CMAKE_INSTALL_SBINDIR}\")
    set(GLLMD_PATH \"${CMAKE_INSTALL_SBINDIR}/gllmd\")
  else()
    set(GLLMD_PATH \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_SBINDIR}/gllmd\")
  endif()
  configure_file(\"${PROJECT_SOURCE_DIR}/systemd/gllmd.service.in\" \"${_gllm_unit_out}\" @ONLY)
" COMPONENT daemon)
install(FILES ${_gllm_unit_out} ${PROJECT_SOURCE_DIR}/systemd/gllmd.socket
        DESTINATION ${GLLM_SYSTEMD_UNITDIR} COMPONENT daemon)
# The metrics timer's service runs the installed gllmctl, written at install time likewise.
set(_gllm_metrics_unit_out ${PROJECT_BINARY_DIR}/systemd/install/gllmd-metrics.service)
install(CODE "
  if(IS_ABSOLUTE \"${CMAKE_INSTALL_BINDIR}\")
    set(GLLMCTL_PATH \"${CMAKE_INSTALL_BINDIR}/gllmctl\")
  else()
    set(GLLMCTL_PATH \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/gllmctl\")
  endif()
  configure_file(\"${PROJECT_SOURCE_DIR}/systemd/gllmd-metrics.service.in\" \"${_gllm_metrics_unit_out}\" @ONLY)
" COMPONENT daemon)
install(FILES ${_gllm_metrics_unit_out} ${PROJECT_SOURCE_DIR}/systemd/gllmd-metrics.timer
        DESTINATION ${GLLM_SYSTEMD_UNITDIR} COMPONENT daemon)
install(FILES completion/gllmctl.bash DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/bash-completion/completions
        RENAME gllmctl COMPONENT daemon)
install(FILES completion/_gllmctl DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/zsh/vendor-completions
        COMPONENT daemon)
install(FILES completion/gllmctl.fish DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/fish/vendor_completions.d
        COMPONENT daemon)
install(FILES systemd/gllm.sysusers.conf DESTINATION ${GLLM_SYSUSERSDIR}
        RENAME gllm.conf COMPONENT daemon)
install(FILES systemd/gllm.tmpfiles.conf DESTINATION ${GLLM_TMPFILESDIR}
        RENAME gllm.conf COMPONENT daemon)
# The kernel manifest: which images gllmd embeds, for which architectures, from which
# sources and compiler.
install(FILES systemd/gllmd.conf.example DESTINATION ${GLLM_DOCDIR_DAEMON} COMPONENT daemon)
install(FILES kernels/prebuilt/MANIFEST DESTINATION ${GLLM_DOCDIR_DAEMON}
        RENAME kernel-manifest.txt COMPONENT daemon)

# --- python: the gllm package (python/gllm), for Debian's python3 ----------------------------
# Pure Python (ctypes over libgllm-client0), so the files are installed as they are; no
# byte-code is shipped (python3 writes its own caches where it may).
set(GLLM_PYTHONDIR "lib/python3/dist-packages" CACHE STRING
    "where the gllm Python package goes (relative: under the install prefix)")
set(GLLM_DOCDIR_PYTHON "${CMAKE_INSTALL_DATAROOTDIR}/doc/python3-gllm")
install(DIRECTORY python/gllm DESTINATION ${GLLM_PYTHONDIR} COMPONENT python
        FILES_MATCHING PATTERN "*.py" PATTERN "py.typed" PATTERN "__pycache__" EXCLUDE)

# --- runtime and dev ----------------------------------------------------------------------
install(TARGETS gllm-client EXPORT gllmTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime
                NAMELINK_COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
gllm_strip_more(runtime ${CMAKE_INSTALL_LIBDIR}/libgllm-client.so.${PROJECT_VERSION})
install(TARGETS gllm-client-archive EXPORT gllmTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/gllm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)# The archive keeps its symbols, which linking needs.
gllm_strip_more(dev ${CMAKE_INSTALL_LIBDIR}/libgllm-client.a
                --strip-debug --remove-section=.note --enable-deterministic-archives)

# find_package(gllm): gllm::client (shared) and gllm::client_static.
set_target_properties(gllm-client PROPERTIES EXPORT_NAME client)
set_target_properties(gllm-client-archive PROPERTIES EXPORT_NAME client_static)
install(EXPORT gllmTargets NAMESPACE gllm:: DESTINATION ${GLLM_CMAKEDIR}
        FILE gllmTargets.cmake COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/gllmConfig.cmake.in
  ${PROJECT_BINARY_DIR}/gllmConfig.cmake INSTALL_DESTINATION ${GLLM_CMAKEDIR})
# 0.x releases break compatibility at minor versions; from 1.0 on, at major ones.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_gllm_compat SameMinorVersion)
else()
  set(_gllm_compat SameMajorVersion)
endif()
write_basic_package_version_file(${PROJECT_BINARY_DIR}/gllmConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${_gllm_compat})
install(FILES ${PROJECT_BINARY_DIR}/gllmConfig.cmake ${PROJECT_BINARY_DIR}/gllmConfigVersion.cmake
        DESTINATION ${GLLM_CMAKEDIR} COMPONENT dev)

# pkg-config: like the unit, the .pc names the prefix it is installed under, which is
# known only when installing.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}" OR IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  message(FATAL_ERROR "gllm.pc needs relative CMAKE_INSTALL_LIBDIR and CMAKE_INSTALL_INCLUDEDIR")
endif()
set(_gllm_pc_out ${PROJECT_BINARY_DIR}/install/gllm.pc)
install(CODE "
  set(GLLM_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
  set(CMAKE_INSTALL_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
  set(CMAKE_INSTALL_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
  set(PROJECT_VERSION \"${PROJECT_VERSION}\")
  configure_file(\"${PROJECT_SOURCE_DIR}/cmake/gllm.pc.in\" \"${_gllm_pc_out}\" @ONLY)
" COMPONENT dev)
install(FILES ${_gllm_pc_out} DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

# The build tree's copy of the unit runs the freshly built gllmd, for systemd-analyze in
# the tests (tests/systemd_units.sh).
file(READ ${PROJECT_SOURCE_DIR}/systemd/gllmd.service.in _gllm_service_template)
string(REPLACE "@GLLMD_PATH@" "$<TARGET_FILE:gllmd>" _gllm_service_build "${_gllm_service_template}")
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/systemd/gllmd.service CONTENT "${_gllm_service_build}")
configure_file(${PROJECT_SOURCE_DIR}/systemd/gllmd.socket ${PROJECT_BINARY_DIR}/systemd/gllmd.socket COPYONLY)
file(READ ${PROJECT_SOURCE_DIR}/systemd/gllmd-metrics.service.in _gllm_metrics_template)
string(REPLACE "@GLLMCTL_PATH@" "$<TARGET_FILE:gllmctl>" _gllm_metrics_build "${_gllm_metrics_template}")
file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/systemd/gllmd-metrics.service CONTENT "${_gllm_metrics_build}")
configure_file(${PROJECT_SOURCE_DIR}/systemd/gllmd-metrics.timer ${PROJECT_BINARY_DIR}/systemd/gllmd-metrics.timer COPYONLY)

# Paperwork, in the form Debian asks of every package (so the packages and the tarball
# hold the same tree): man pages gzipped, the upstream changelog as changelog.gz, the
# licence as a machine-readable copyright file, and a changelog.Debian.gz.
find_program(GLLM_GZIP gzip REQUIRED)
string(TIMESTAMP GLLM_DEB_DATE "%a, %d %b %Y %H:%M:%S +0000" UTC)
set(GLLM_DEB_VERSION "${PROJECT_VERSION}-1")
set(GLLM_DEB_SOURCE gllm)
if(NOT CPACK_PACKAGE_CONTACT)
  set(CPACK_PACKAGE_CONTACT "${GLLM_PACKAGE_MAINTAINER}")
endif()
configure_file(cmake/debian/changelog.Debian.in ${PROJECT_BINARY_DIR}/doc/changelog.Debian @ONLY)
# Man pages go to man/manN/ in the build tree, where MANPATH can find them (the unit's
# Documentation= is checked by systemd-analyze in the tests).
set(_gllm_gz_outputs "")
foreach(src man/gllmd.8 man/gllmctl.1 man/gllmd.conf.5 man/libgllm-client.3
            CHANGELOG.md ${PROJECT_BINARY_DIR}/doc/changelog.Debian)
  get_filename_component(_name ${src} NAME)
  set(_dir ${PROJECT_BINARY_DIR}/doc)
  if(_name STREQUAL "CHANGELOG.md")
    set(_name changelog)
  elseif(_name MATCHES "\\.([1-8])$")
    set(_dir ${PROJECT_BINARY_DIR}/man/man${CMAKE_MATCH_1})
  endif()
  if(NOT IS_ABSOLUTE ${src})
    set(src ${PROJECT_SOURCE_DIR}/${src})
  endif()
  file(MAKE_DIRECTORY ${_dir})
  # -n: no name or time stamp inside, so the same input gives the same bytes.
  add_custom_command(OUTPUT ${_dir}/${_name}.gz
    COMMAND ${GLLM_GZIP} -9nc ${src} > ${_dir}/${_name}.gz
    DEPENDS ${src} VERBATIM)
  list(APPEND _gllm_gz_outputs ${_dir}/${_name}.gz)
endforeach()
add_custom_target(gllm_docs ALL DEPENDS ${_gllm_gz_outputs})
set(_d ${PROJECT_BINARY_DIR}/doc)
set(_m ${PROJECT_BINARY_DIR}/man)
install(FILES ${_m}/man8/gllmd.8.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man8 COMPONENT daemon)
install(FILES ${_m}/man1/gllmctl.1.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT daemon)
install(FILES ${_m}/man5/gllmd.conf.5.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man5 COMPONENT daemon)
install(FILES ${_m}/man3/libgllm-client.3.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man3 COMPONENT dev)
foreach(comp daemon runtime dev python)
  string(TOUPPER ${comp} _c)
  install(FILES cmake/debian/copyright ${_d}/changelog.gz ${_d}/changelog.Debian.gz
          DESTINATION ${GLLM_DOCDIR_${_c}} COMPONENT ${comp})
endforeach()
# lintian's overrides, each with the reason beside it.
install(FILES cmake/debian/gllmd/lintian-overrides DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides
        RENAME gllmd COMPONENT daemon)
install(FILES cmake/debian/libgllm-client0/lintian-overrides
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides
        RENAME libgllm-client${GLLM_SOVERSION} COMPONENT runtime)
install(FILES cmake/debian/libgllm-client-dev/lintian-overrides
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides
        RENAME libgllm-client-dev COMPONENT dev)
install(FILES cmake/debian/python3-gllm/lintian-overrides
        DESTINATION ${CMAKE_INSTALL_DATAROOTDIR}/lintian/overrides
        RENAME python3-gllm COMPONENT python)
