# install.cmake — `cmake --install` puts the libraries, public headers, a CMake package config
# (find_package(telemark) → telemark::protocol, telemark::agent) and a pkg-config file in place.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(tmk_install_targets tmk_protocol)
if(TARGET tmk_lz4)
  install(TARGETS tmk_lz4 EXPORT telemarkTargets)
endif()
if(TARGET tmk_agent)
  list(APPEND tmk_install_targets tmk_agent)
endif()
foreach(t ${tmk_install_targets})
  get_target_property(tmk_hdrs ${t} TMK_PUBLIC_HEADERS)
  if(tmk_hdrs)
    install(FILES ${tmk_hdrs} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/telemark)
  endif()
  target_include_directories(${t} INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/telemark>)
endforeach()
install(TARGETS ${tmk_install_targets} EXPORT telemarkTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
if(TARGET telemark-relay)
  install(TARGETS telemark-relay RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT telemarkTargets NAMESPACE telemark:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/telemark)
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/telemarkConfig.cmake.in
  ${CMAKE_BINARY_DIR}/telemarkConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/telemark)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/telemarkConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/telemarkConfig.cmake ${CMAKE_BINARY_DIR}/telemarkConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/telemark)

set(TMK_PC_LIBS "-ltmk_protocol")
set(TMK_PC_PRIVATE "")
if(TARGET tmk_agent)
  set(TMK_PC_LIBS "-ltmk_agent -ltmk_protocol")
  set(TMK_PC_PRIVATE "-lpthread")
endif()
if(TMK_HAVE_LZ4)
  set(TMK_PC_PRIVATE "${TMK_PC_PRIVATE} -llz4")
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/telemark.pc.in ${CMAKE_BINARY_DIR}/telemark.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/telemark.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
