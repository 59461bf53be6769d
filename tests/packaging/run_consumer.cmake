# Builds and runs a consumer project the way a user would.
#   KIND=find_package: install sluice into a prefix, then find_package(sluice CONFIG) from it.
#   KIND=subdir:       add_subdirectory(<sluice source>) from the consumer.
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "command failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endfunction()
set(consumer_args -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release)
if(KIND STREQUAL "find_package")
  run(${CMAKE_COMMAND} -S ${SLUICE_SOURCE_DIR} -B ${WORK_DIR}/sluice-build -DCMAKE_CXX_COMPILER=${CXX}
      -DSLUICE_BUILD_TESTS=OFF -DSLUICE_BUILD_EXAMPLES=OFF -DSLUICE_BUILD_BENCHMARKS=OFF -DSLUICE_BUILD_PYTHON=OFF
      -DSLUICE_BUILD_TOOLS=ON -DSLUICE_INSTALL=ON -DSLUICE_ENABLE_CUDA=OFF -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
  # The README's recipe: build the shard tool, install; bin/sluice-pack must run from the prefix.
  run(${CMAKE_COMMAND} --build ${WORK_DIR}/sluice-build --target sluice_pack)
  run(${CMAKE_COMMAND} --install ${WORK_DIR}/sluice-build)
  if(NOT EXISTS ${WORK_DIR}/prefix/bin/sluice-pack)
    message(FATAL_ERROR "cmake --install did not put sluice-pack in ${WORK_DIR}/prefix/bin")
  endif()
  run(${WORK_DIR}/prefix/bin/sluice-pack --help)
  list(APPEND consumer_args -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
else()
  list(APPEND consumer_args -DSLUICE_SOURCE_DIR=${SLUICE_SOURCE_DIR})
endif()
run(${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/consumer-build ${consumer_args})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer-build)
run(${WORK_DIR}/consumer-build/consumer)
message(STATUS "${KIND} consumer built and ran")
