# cross.cmake — which cross targets this machine can build and run under qemu-user. Sets
# TMK_CROSS_TARGETS (a list of short names: ppc, mipsel) and for each short name S:
#   TMK_CROSS_S_ARCH  the GNU triplet's CPU (powerpc, mipsel)
#   TMK_CROSS_S_QEMU  the qemu-user binary
#   TMK_CROSS_S_BE    1 for a big-endian target
# The cross sub-builds (cmake/subbuilds.cmake) and the tests that run their binaries from the
# host (tests/agent, tests/relay) all read these, so they agree on what exists.
set(TMK_CROSS_TARGETS "")
if(TMK_CROSS_TESTS AND TMK_SUBBUILD STREQUAL "")
  foreach(spec "ppc:powerpc:qemu-ppc:1" "mipsel:mipsel:qemu-mipsel:0")
    string(REPLACE ":" ";" f "${spec}")
    list(GET f 0 short)
    list(GET f 1 arch)
    list(GET f 2 q)
    list(GET f 3 be)
    find_program(TMK_${arch}_GCC ${arch}-linux-gnu-gcc)
    find_program(TMK_${arch}_QEMU ${q})
    if(TMK_${arch}_GCC AND TMK_${arch}_QEMU)
      list(APPEND TMK_CROSS_TARGETS ${short})
      set(TMK_CROSS_${short}_ARCH ${arch})
      set(TMK_CROSS_${short}_QEMU ${TMK_${arch}_QEMU})
      set(TMK_CROSS_${short}_BE ${be})
    else()
      message(WARNING "telemark: ${arch}-linux-gnu-gcc or ${q} missing; ${short} cross tests "
                      "skipped (scripts/deps.sh installs them)")
    endif()
  endforeach()
endif()

# Windows: MinGW-w64 builds the agent with platforms/win32 (sub-build win32), wine runs it
# (tests/win32). TMK_WIN32_TESTS says both exist; TMK_WINE is the wine binary.
set(TMK_WIN32_TESTS OFF)
if(TMK_CROSS_TESTS AND TMK_SUBBUILD STREQUAL "")
  find_program(TMK_MINGW_GCC x86_64-w64-mingw32-gcc)
  find_program(TMK_WINE NAMES wine64 wine PATHS /usr/lib/wine)
  if(TMK_MINGW_GCC AND TMK_WINE)
    set(TMK_WIN32_TESTS ON)
  else()
    message(WARNING "telemark: x86_64-w64-mingw32-gcc or wine missing; Windows tests skipped "
                    "(scripts/deps.sh installs them)")
  endif()
endif()
