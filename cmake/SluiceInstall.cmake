include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/sluice DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS sluice EXPORT sluiceTargets)
install(EXPORT sluiceTargets NAMESPACE sluice:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
export(EXPORT sluiceTargets NAMESPACE sluice:: FILE ${PROJECT_BINARY_DIR}/sluiceTargets.cmake)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/sluiceConfig.cmake.in
  ${PROJECT_BINARY_DIR}/sluiceConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
# A header-only library does not depend on the architecture: ARCH_INDEPENDENT lets a 32-bit
# consumer use a package installed from a 64-bit build.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/sluiceConfigVersion.cmake
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
# sluiceConfig.cmake finds the optional dependencies with the build's own rules.
configure_file(${PROJECT_SOURCE_DIR}/cmake/SluiceDependencies.cmake ${PROJECT_BINARY_DIR}/SluiceDependencies.cmake COPYONLY)
install(FILES ${PROJECT_BINARY_DIR}/sluiceConfig.cmake ${PROJECT_BINARY_DIR}/sluiceConfigVersion.cmake
  ${PROJECT_SOURCE_DIR}/cmake/SluiceDependencies.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)

# The optional parts travel too, each in its own export set, so a consumer gets sluice::zlib,
# sluice::jpeg, sluice::png, sluice::dlpack, sluice::curl, sluice::video and sluice::cuda when it has their dependencies (sluiceConfig.cmake looks for them
# and includes each part's targets only then): find_package(sluice COMPONENTS jpeg) or
# OPTIONAL_COMPONENTS.
foreach(_part IN ITEMS zlib jpeg png dlpack curl video cuda)
  if(TARGET sluice_${_part})
    set_target_properties(sluice_${_part} PROPERTIES EXPORT_NAME ${_part})
    install(TARGETS sluice_${_part} EXPORT sluice_${_part}Targets)
    install(EXPORT sluice_${_part}Targets NAMESPACE sluice:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
  endif()
endforeach()
