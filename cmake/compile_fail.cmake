# Runs the compiler on SRC with -D${CASE}; passes only if compilation fails AND the diagnostics
# contain the expected words for that case (so a failure for another reason does not count).
set(expect_DECODE_AFTER_FROM "this stage cannot take what the stage before it hands out" "\"decode\"" "from\\(sampler\\)")
set(expect_BATCH_STAGE_BEFORE_COLLATE "per-batch stage .* cannot follow a per-sample" "\"pin\"" "\"read\"")
set(expect_SAMPLE_STAGE_AFTER_COLLATE "per-sample stage .* cannot follow collate" "\"read\"" "\"collate\"")
set(expect_COLLATE_IDS "collate needs samples with bytes" "\"collate\"" "from\\(sampler\\)")
set(expect_PREFETCH_BEFORE_COLLATE "per-batch stage .* cannot follow a per-sample" "\"prefetch\"" "\"read\"")
set(expect_MISSPELT_BATCH_FIELD "batch has no field of this name" "no_such_field<.*imgae")
set(expect_MISSPELT_COLLATE_FIELD "no field of this name in the sample's schema" "schema_has_no_field<.*lable")
set(expect_WRONG_FIELD_DTYPE "element type is not the field's" "image")
set(expect_VARIABLE_FIELD_STACKED "has a variable-length field" "pad<")
execute_process(
  COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INCLUDE} -D${CASE} ${SRC}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "case ${CASE} compiled, but it must not")
endif()
foreach(pattern IN LISTS expect_${CASE})
  if(NOT err MATCHES "${pattern}")
    message(FATAL_ERROR "case ${CASE}: diagnostics lack '${pattern}':\n${err}")
  endif()
endforeach()
message(STATUS "case ${CASE} failed to compile as expected")
