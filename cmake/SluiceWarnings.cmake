# Warnings and sanitizer flags for sluice's own targets (never pushed onto consumers).
add_library(sluice_dev_flags INTERFACE)
target_compile_options(sluice_dev_flags INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wno-unused-parameter>)
if(SLUICE_SANITIZE STREQUAL "thread")
  target_compile_options(sluice_dev_flags INTERFACE -fsanitize=thread -fno-omit-frame-pointer)
  target_link_options(sluice_dev_flags INTERFACE -fsanitize=thread)
elseif(SLUICE_SANITIZE STREQUAL "address")
  target_compile_options(sluice_dev_flags INTERFACE
    -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  target_link_options(sluice_dev_flags INTERFACE -fsanitize=address,undefined)
elseif(NOT SLUICE_SANITIZE STREQUAL "")
  message(FATAL_ERROR "SLUICE_SANITIZE must be thread, address or empty (got '${SLUICE_SANITIZE}')")
endif()
