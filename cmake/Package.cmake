# Install rules and the Debian packages (CPack DEB):
#
#   cmake --build build --target package      (or scripts/package.sh, which checks them)
#
# gives, in the build directory:
#   tracecorr_<version>_<arch>.deb          /usr/bin/tracecorr (stripped), its BPF objects
#                                           (/usr/lib/tracecorr/bpf), every protocol's reference
#                                           and mutants (/usr/lib/tracecorr/fixtures), man pages,
#                                           bash completion, changelog
#   python3-tracecorr_<version>_<arch>.deb  the Python module and its pytest plugin
#   tracecorr-dbgsym_<version>_<arch>.deb   the debug information split from both
#
# Nothing here runs in the main job's build (scripts/setup.sh builds named targets):
# the stripped copies and man pages are made by `tracecorr_dist`, which the
# package target builds through ALL.
include(GNUInstallDirs)

set(TRACECORR_PKG_LIBDIR lib/tracecorr)  # /usr/lib/tracecorr: this architecture's files
set(TRACECORR_DIST_DIR ${CMAKE_BINARY_DIR}/dist)
set(TRACECORR_DEBUG_DIR lib/debug/usr)   # gdb finds <dir>/<debuglink> under /usr/lib/debug

# A program or module stripped, its debug information kept apart (objcopy
# --add-gnu-debuglink): tracecorr_split_debug(<target> <stripped path> <debug path>)
find_program(TRACECORR_OBJCOPY NAMES ${CMAKE_OBJCOPY} objcopy)
function(tracecorr_split_debug target stripped debug)
  get_filename_component(debug_name ${debug} NAME)
  get_filename_component(stripped_dir ${stripped} DIRECTORY)
  get_filename_component(debug_dir ${debug} DIRECTORY)
  add_custom_command(OUTPUT ${stripped} ${debug}
    COMMAND ${CMAKE_COMMAND} -E make_directory ${stripped_dir} ${debug_dir}
    COMMAND ${TRACECORR_OBJCOPY} --only-keep-debug $<TARGET_FILE:${target}> ${debug}
    COMMAND ${TRACECORR_OBJCOPY} --strip-unneeded $<TARGET_FILE:${target}> ${stripped}
    COMMAND ${CMAKE_COMMAND} -E chdir ${debug_dir} ${TRACECORR_OBJCOPY} --add-gnu-debuglink=${debug_name} ${stripped}
    DEPENDS ${target}
    COMMENT "Splitting the debug information of ${target}"
    VERBATIM)
endfunction()

set(dist_outputs ${TRACECORR_DIST_DIR}/bin/tracecorr)
tracecorr_split_debug(tracecorr_cli ${TRACECORR_DIST_DIR}/bin/tracecorr ${TRACECORR_DIST_DIR}/debug/bin/tracecorr.debug)
install(PROGRAMS ${TRACECORR_DIST_DIR}/bin/tracecorr DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT cli)
install(FILES ${TRACECORR_DIST_DIR}/debug/bin/tracecorr.debug DESTINATION ${TRACECORR_DEBUG_DIR}/bin COMPONENT dbgsym)

# The BPF objects (the CLI carries them too, as skeletons) for whoever loads them another way.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(bpf_arch arm64)
  set(fixture_arch arm64)
else()
  set(bpf_arch x86)
  set(fixture_arch x86_64)
endif()
if(TARGET tracecorr_bpf)
  install(DIRECTORY ${CMAKE_BINARY_DIR}/bpf/${bpf_arch}/ DESTINATION ${TRACECORR_PKG_LIBDIR}/bpf COMPONENT cli
          FILES_MATCHING PATTERN "*.bpf.o")
endif()

# Every protocol's reference and mutants for this architecture, as built
# (fixtures/CMakeLists.txt): /usr/lib/tracecorr/fixtures/{reference,mutants,<package>}/...
install(DIRECTORY ${CMAKE_BINARY_DIR}/fixtures/${fixture_arch}/ DESTINATION ${TRACECORR_PKG_LIBDIR}/fixtures
        COMPONENT cli USE_SOURCE_PERMISSIONS)
# Their DWARF goes (it names the build tree; a quarter of the size); their
# symbol tables stay: mutants are told apart by what their symbols are, and
# the HTML report names the functions of a sampled stack.
install(CODE "
  file(GLOB_RECURSE files \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${TRACECORR_PKG_LIBDIR}/fixtures/*\")
  foreach(file IN LISTS files)
    file(READ \${file} magic LIMIT 4 HEX)
    if(magic STREQUAL \"7f454c46\")
      execute_process(COMMAND ${TRACECORR_OBJCOPY} --strip-debug \${file} COMMAND_ERROR_IS_FATAL ANY)
    endif()
  endforeach()" COMPONENT cli)

# Man pages from the CLI's own --help (help2man), one per subcommand. A cross
# build cannot run its CLI: scripts/package.sh hands it the host build's pages
# (TRACECORR_MAN_DIR).
set(TRACECORR_MAN_DIR "" CACHE PATH "Man pages made elsewhere (a cross build's); default: made here with help2man")
if(TRACECORR_MAN_DIR)
  set(man_dir ${TRACECORR_MAN_DIR})
else()
  find_program(TRACECORR_HELP2MAN help2man)
endif()
if(NOT TRACECORR_MAN_DIR AND (CMAKE_CROSSCOMPILING OR NOT TRACECORR_HELP2MAN))
  # A plain `ninja` of the main job's build still works; scripts/package.sh installs help2man.
  message(STATUS "tracecorr: no man pages in the packages (help2man not found, or a cross build without TRACECORR_MAN_DIR)")
elseif(NOT TRACECORR_MAN_DIR)
  set(man_dir ${TRACECORR_DIST_DIR}/man)
  add_custom_command(OUTPUT ${man_dir}/tracecorr.1.gz
    COMMAND ${CMAKE_COMMAND} -DTRACECORR=$<TARGET_FILE:tracecorr_cli> -DHELP2MAN=${TRACECORR_HELP2MAN}
            -DOUT=${man_dir} -DVERSION=${PROJECT_VERSION} -P ${CMAKE_CURRENT_LIST_DIR}/GenerateManPages.cmake
    DEPENDS tracecorr_cli ${CMAKE_CURRENT_LIST_DIR}/GenerateManPages.cmake
    COMMENT "Man pages from tracecorr --help"
    VERBATIM)
  list(APPEND dist_outputs ${man_dir}/tracecorr.1.gz)
endif()
if(man_dir)
  install(DIRECTORY ${man_dir}/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man1 COMPONENT cli FILES_MATCHING PATTERN "*.1.gz")
endif()

# Bash completion: subcommands and options read from the CLI's --help when completing.
install(FILES ${PROJECT_SOURCE_DIR}/packaging/bash-completion/tracecorr
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions COMPONENT cli)

# Changelog and copyright, where Debian keeps them (the changelog gzipped).
add_custom_command(OUTPUT ${TRACECORR_DIST_DIR}/doc/changelog.Debian.gz
  COMMAND ${CMAKE_COMMAND} -E make_directory ${TRACECORR_DIST_DIR}/doc
  COMMAND gzip -9 -n -c ${PROJECT_SOURCE_DIR}/packaging/changelog > ${TRACECORR_DIST_DIR}/doc/changelog.Debian.gz
  DEPENDS ${PROJECT_SOURCE_DIR}/packaging/changelog
  VERBATIM)
list(APPEND dist_outputs ${TRACECORR_DIST_DIR}/doc/changelog.Debian.gz)
foreach(component cli python dbgsym)
  set(doc_package tracecorr)
  if(component STREQUAL "python")
    set(doc_package python3-tracecorr)
  elseif(component STREQUAL "dbgsym")
    set(doc_package tracecorr-dbgsym)
  endif()
  install(FILES ${TRACECORR_DIST_DIR}/doc/changelog.Debian.gz ${PROJECT_SOURCE_DIR}/packaging/copyright
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${doc_package} COMPONENT ${component})
endforeach()

# The Python module (python/CMakeLists.txt installs it) is stripped the same way.
if(TARGET tracecorr_python)
  get_target_property(module_suffix tracecorr_python SUFFIX)
  set(module_file _tracecorr${module_suffix})
  tracecorr_split_debug(tracecorr_python ${TRACECORR_DIST_DIR}/python/${module_file}
                        ${TRACECORR_DIST_DIR}/debug/python/${module_file}.debug)
  list(APPEND dist_outputs ${TRACECORR_DIST_DIR}/python/${module_file})
  set(TRACECORR_PYTHON_SITE lib/python3/dist-packages)  # Debian's, for every python3.x
  install(FILES ${TRACECORR_DIST_DIR}/python/${module_file}
          DESTINATION ${TRACECORR_PYTHON_SITE}/tracecorr COMPONENT python)
  install(FILES ${TRACECORR_DIST_DIR}/debug/python/${module_file}.debug
          DESTINATION ${TRACECORR_DEBUG_DIR}/${TRACECORR_PYTHON_SITE}/tracecorr COMPONENT dbgsym)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/tracecorr/ DESTINATION ${TRACECORR_PYTHON_SITE}/tracecorr
          COMPONENT python FILES_MATCHING PATTERN "*.py" PATTERN "*.pyi" PATTERN "py.typed"
          PATTERN "__pycache__" EXCLUDE)
  # What makes it a distribution pip and pytest see: its name, version and the
  # pytest11 entry point (the plugin), as in pyproject.toml.
  set(dist_info ${TRACECORR_DIST_DIR}/python/tracecorr-${PROJECT_VERSION}.dist-info)
  file(CONFIGURE OUTPUT ${dist_info}/METADATA CONTENT
"Metadata-Version: 2.1
Name: tracecorr
Version: ${PROJECT_VERSION}
Summary: Python bindings and pytest plugin for the tracecorr trace-correlation conformance kit
License: Apache-2.0
Requires-Python: >=3.9
")
  file(CONFIGURE OUTPUT ${dist_info}/entry_points.txt CONTENT "[pytest11]\ntracecorr = tracecorr.pytest_plugin\n")
  file(CONFIGURE OUTPUT ${dist_info}/top_level.txt CONTENT "tracecorr\n")
  file(CONFIGURE OUTPUT ${dist_info}/INSTALLER CONTENT "dpkg\n")
  install(DIRECTORY ${dist_info} DESTINATION ${TRACECORR_PYTHON_SITE} COMPONENT python)
endif()

add_custom_target(tracecorr_dist ALL DEPENDS ${dist_outputs})

# ---- CPack ----------------------------------------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME tracecorr)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_PACKAGE_DIRECTORY ${CMAKE_BINARY_DIR}/packages)
set(CPACK_PACKAGE_CONTACT "tracecorr developers <tracecorr@localhost>")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/open-telemetry/opentelemetry-specification")
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL cli dbgsym)
if(TARGET tracecorr_python)
  list(APPEND CPACK_COMPONENTS_ALL python)
endif()
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # <name>_<version>_<arch>.deb
# dpkg-shlibdeps finds a library's package in this machine's dpkg database, where
# a cross build's libraries are not (they are in its sysroot): scripts/package.sh
# hands a cross build the native package's dependencies instead, after checking
# that both CLIs need the same libraries (the same Debian release names them alike).
set(TRACECORR_DEB_DEPENDS "" CACHE STRING "Depends of the tracecorr package of a cross build")
if(CMAKE_CROSSCOMPILING)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS OFF)
  set(CPACK_DEBIAN_CLI_PACKAGE_DEPENDS "${TRACECORR_DEB_DEPENDS}")
else()
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
endif()
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
if(CMAKE_CROSSCOMPILING AND CMAKE_SYSTEM_PROCESSOR MATCHES "aarch64|arm64")
  set(CPACK_DEBIAN_PACKAGE_ARCHITECTURE arm64)
endif()

set(CPACK_DEBIAN_CLI_PACKAGE_NAME tracecorr)
set(CPACK_COMPONENT_CLI_DESCRIPTION "conformance kit and host-agent simulator for profiler-to-tracer trace correlation
 tracecorr judges an APM agent or SDK against the protocols by which a
 continuous profiler reads the active trace and span of each sampled thread:
 Elastic's profiler-to-tracer correlation (v1), the OpenTelemetry process
 context (OTEP 4719) and thread context (OTEP 4947). It gives a verdict per
 requirement for people and CI (JUnit, JSON, HTML), inspects what a process
 publishes, and runs a complete host agent (BPF or ptrace sampling).
 .
 Each protocol's conforming reference and one mutant per rule are installed
 under /usr/lib/tracecorr/fixtures.")
set(CPACK_DEBIAN_CLI_PACKAGE_RECOMMENDS "musl")  # the OTEP 4947 fixtures' musl models

set(CPACK_DEBIAN_PYTHON_PACKAGE_NAME python3-tracecorr)
set(CPACK_DEBIAN_PYTHON_PACKAGE_SECTION python)
set(CPACK_COMPONENT_PYTHON_DESCRIPTION "Python bindings and pytest plugin of tracecorr
 The tracecorr module (targets, conformance runs, sampling, OTLP) and a
 pytest plugin for scripted scenarios against an agent under test.")
# The module is built for this python3.x only (its EXT_SUFFIX names it).
math(EXPR python_next_minor "${Python3_VERSION_MINOR} + 1")
set(CPACK_DEBIAN_PYTHON_PACKAGE_DEPENDS
    "python3 (>= ${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}), python3 (<< ${Python3_VERSION_MAJOR}.${python_next_minor})")
set(CPACK_DEBIAN_PYTHON_PACKAGE_RECOMMENDS "python3-pytest, tracecorr (= ${PROJECT_VERSION})")

set(CPACK_DEBIAN_DBGSYM_PACKAGE_NAME tracecorr-dbgsym)
set(CPACK_DEBIAN_DBGSYM_PACKAGE_SECTION debug)
set(CPACK_DEBIAN_DBGSYM_PACKAGE_SHLIBDEPS OFF)
set(CPACK_DEBIAN_DBGSYM_PACKAGE_DEPENDS "tracecorr (= ${PROJECT_VERSION})")
set(CPACK_COMPONENT_DBGSYM_DESCRIPTION "debug symbols of tracecorr and python3-tracecorr")

include(CPack)
