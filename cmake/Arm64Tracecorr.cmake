# arm64 hook, included by the top-level CMakeLists.txt after the parts:
#   include(cmake/Arm64Tracecorr.cmake)
# Native build only: convenience targets that drive the arm64 scripts (never part
# of ALL). The arm64 cross build itself (cmake/arm64/toolchain.cmake) needs nothing here.
if(CMAKE_CROSSCOMPILING)
  return()
endif()

# Cross-builds tracecorr into build-arm64/ (needs scripts/arm64/prepare.sh once, as root).
add_custom_target(arm64_tracecorr
  COMMAND ${CMAKE_SOURCE_DIR}/scripts/arm64/build-tracecorr.sh
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} USES_TERMINAL
  COMMENT "Cross-building tracecorr for arm64 into build-arm64/")
# Boots the pinned arm64 kernel under qemu and checks BPF + the sampler there.
add_custom_target(arm64_system_test
  COMMAND ${CMAKE_COMMAND} -E env TRACECORR_BUILD=${CMAKE_BINARY_DIR}
          /usr/bin/python3 -m pytest -p no:cacheprovider -q -rfEs tests/py/test_arm64_system.py
  WORKING_DIRECTORY ${CMAKE_SOURCE_DIR} USES_TERMINAL
  COMMENT "Running the arm64 full-system test under qemu-system-aarch64")
