# subbuilds.cmake — builds this same source tree again with another compiler, as part of the host
# build, and registers one host CTest per sub-build that runs that sub-build's own CTest:
#   cross-ppc    powerpc-linux-gnu (32-bit, big-endian), tests run under qemu-ppc
#   cross-mipsel mipsel-linux-gnu  (32-bit, PSP-like CPU), tests run under qemu-mipsel
#   fuzz         clang with -fsanitize=fuzzer,address,undefined
include(ExternalProject)

function(tmk_subbuild name)
  cmake_parse_arguments(A "" "" "ARGS" ${ARGN})
  set(dir ${CMAKE_BINARY_DIR}/sub/${name})
  ExternalProject_Add(sub-${name}
    SOURCE_DIR ${CMAKE_SOURCE_DIR}
    BINARY_DIR ${dir}
    CMAKE_ARGS -DTMK_SUBBUILD=${name} -DTMK_BUILD_TESTS=ON -DTMK_BUILD_BENCH=OFF
               -DTMK_CROSS_TESTS=OFF -DTMK_FUZZ=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo ${A_ARGS}
    INSTALL_COMMAND ""
    BUILD_ALWAYS ON
    USES_TERMINAL_BUILD ON)
  add_test(NAME ${name}
    COMMAND ${CMAKE_CTEST_COMMAND} --test-dir ${dir} --output-on-failure)
  set_tests_properties(${name} PROPERTIES LABELS sub)
endfunction()

foreach(short ${TMK_CROSS_TARGETS}) # found by cmake/cross.cmake
  set(arch ${TMK_CROSS_${short}_ARCH})
  tmk_subbuild(cross-${short} ARGS
    -DCMAKE_TOOLCHAIN_FILE=${CMAKE_SOURCE_DIR}/cmake/toolchains/${arch}-linux-gnu.cmake
    -DTMK_BUILD_RELAY=OFF -DTMK_WITH_LZ4=OFF)
endforeach()

if(TMK_FUZZ)
  find_program(TMK_CLANG clang)
  if(TMK_CLANG)
    tmk_subbuild(fuzz ARGS -DCMAKE_C_COMPILER=${TMK_CLANG} -DTMK_BUILD_RELAY=OFF)
  else()
    message(WARNING "telemark: clang missing; fuzz tests skipped (scripts/deps.sh installs it)")
  endif()
endif()

# win32: the agent and tests/win32's program for Windows with MinGW-w64; build only. Its
# programs run under wine from the host build's tests (tests/win32), next to a host relay.
if(TMK_WIN32_TESTS)
  ExternalProject_Add(sub-win32
    SOURCE_DIR ${CMAKE_SOURCE_DIR}
    BINARY_DIR ${CMAKE_BINARY_DIR}/sub/win32
    CMAKE_ARGS -DTMK_SUBBUILD=win32 -DTMK_BUILD_TESTS=ON -DTMK_BUILD_BENCH=OFF
               -DTMK_CROSS_TESTS=OFF -DTMK_FUZZ=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
               -DCMAKE_TOOLCHAIN_FILE=${CMAKE_SOURCE_DIR}/cmake/toolchains/x86_64-w64-mingw32.cmake
               -DTMK_BUILD_RELAY=OFF -DTMK_WITH_LZ4=OFF
    INSTALL_COMMAND ""
    BUILD_ALWAYS ON
    USES_TERMINAL_BUILD ON)
endif()
