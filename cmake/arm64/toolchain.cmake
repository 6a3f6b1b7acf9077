# Cross toolchain for building tracecorr for arm64 (aarch64-linux-gnu) on Debian 12.
#
#   cmake -S . -B build-arm64 -G Ninja -DCMAKE_TOOLCHAIN_FILE=cmake/arm64/toolchain.cmake
#
# Compiler, libc, libstdc++ and kernel headers: Debian's cross toolchain
# (gcc/g++-aarch64-linux-gnu, living in /usr/aarch64-linux-gnu).
# Every other target library (libelf, libbpf, zlib, ...) and the header-only
# packages (nlohmann-json, CLI11, with their CMake package files) come from the
# sysroot that scripts/arm64/prepare.sh extracts from Debian's arm64 .debs.
# No --sysroot: the cross gcc already knows where its libc is, and the extracted
# sysroot has no libc of its own; it is added as extra search paths instead.
#
# TRACECORR_ARM64_SYSROOT (cache or environment variable) names the extracted
# sysroot; default <repo>/build-arm64-sysroot.
#
# The BPF part needs nothing from here: bpf/CMakeLists.txt compiles its objects
# with -D__TARGET_ARCH_<arch> for both architectures and picks the native
# skeleton from CMAKE_SYSTEM_PROCESSOR; clang and bpftool are host programs.
#
# The binaries link dynamically, like the native build: Debian ships cpp-httplib
# (OTLP receiver) only as a shared library, so a fully static tracecorr would need
# cpp-httplib built from source. The guest initramfs copies the needed .so files
# from this sysroot and the cross toolchain (tests/arm64/arm64_guest.py).

set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)

set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)

get_filename_component(_tracecorr_repo "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
if(NOT DEFINED TRACECORR_ARM64_SYSROOT)
  if(DEFINED ENV{TRACECORR_ARM64_SYSROOT})
    set(TRACECORR_ARM64_SYSROOT "$ENV{TRACECORR_ARM64_SYSROOT}")
  else()
    set(TRACECORR_ARM64_SYSROOT "${_tracecorr_repo}/build-arm64-sysroot")
  endif()
endif()
# try_compile() projects re-read this file without the cache: hand the path on.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES TRACECORR_ARM64_SYSROOT)

if(NOT EXISTS "${TRACECORR_ARM64_SYSROOT}/.tracecorr-debs")
  message(FATAL_ERROR "arm64 sysroot not found at ${TRACECORR_ARM64_SYSROOT}: run scripts/arm64/prepare.sh (as root) first")
endif()

set(_sysroot "${TRACECORR_ARM64_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH "${_sysroot}" /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)  # build tools (python3, bpftool, clang) are host programs
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# Headers of the extracted packages, on every compile line whatever flags the user
# sets: pkg-config drops "-I/usr/include" as a system directory even when it maps
# into the sysroot, and Debian's cross gcc searches the host's /usr/include last,
# so without these a header missing from the sysroot would silently come from the
# host. Multiarch headers (e.g. openssl/opensslconf.h) first, as gcc orders its own.
set(CMAKE_C_STANDARD_INCLUDE_DIRECTORIES "${_sysroot}/usr/include/aarch64-linux-gnu" "${_sysroot}/usr/include")
set(CMAKE_CXX_STANDARD_INCLUDE_DIRECTORIES ${CMAKE_C_STANDARD_INCLUDE_DIRECTORIES})
set(_link_flags "")
foreach(_libdir "${_sysroot}/usr/lib/aarch64-linux-gnu" "${_sysroot}/lib/aarch64-linux-gnu")
  string(APPEND _link_flags " -L${_libdir} -Wl,-rpath-link,${_libdir}")
endforeach()
set(CMAKE_EXE_LINKER_FLAGS_INIT "${_link_flags}")
set(CMAKE_SHARED_LINKER_FLAGS_INIT "${_link_flags}")
set(CMAKE_MODULE_LINKER_FLAGS_INIT "${_link_flags}")

# pkg-config sees only the sysroot's .pc files, with paths mapped into it.
set(ENV{PKG_CONFIG_SYSROOT_DIR} "${_sysroot}")
set(ENV{PKG_CONFIG_LIBDIR} "${_sysroot}/usr/lib/aarch64-linux-gnu/pkgconfig:${_sysroot}/usr/share/pkgconfig")
set(ENV{PKG_CONFIG_PATH} "")

# Cross-built programs run on the host through qemu-user (e.g. for tests or generators).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
