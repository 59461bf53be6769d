# Runs the compiler on SRC with -D${CASE}; passes only if compilation fails and the diagnostic
# says which token types are allowed (so a failure for another reason does not count).
execute_process(
  COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INCLUDE} -D${CASE} ${SRC}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "case ${CASE} compiled, but it must not")
endif()
if(NOT err MATCHES "T is std::uint16_t or std::uint32_t")
  message(FATAL_ERROR "case ${CASE}: the diagnostic does not name the allowed token types:\n${err}")
endif()
message(STATUS "case ${CASE} failed to compile as expected")
