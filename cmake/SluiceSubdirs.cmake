# Adds every immediate subdirectory of the current source directory that has a CMakeLists.txt,
# in sorted order. Each part of sluice (core, io, codec, cuda, policy, diag, ...) keeps its tests,
# examples and benchmarks in its own subdirectory, so adding one never edits a shared list.
function(sluice_add_subdirectories)
  file(GLOB _children LIST_DIRECTORIES true RELATIVE ${CMAKE_CURRENT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT _children)
  foreach(_child IN LISTS _children)
    if(IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${_child} AND EXISTS ${CMAKE_CURRENT_SOURCE_DIR}/${_child}/CMakeLists.txt)
      add_subdirectory(${_child})
    endif()
  endforeach()
endfunction()
