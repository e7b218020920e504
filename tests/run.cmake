# tests/run.cmake — run(<command>...) for the cmake -P checks (package/, abi/): stops the script with the command,
# its exit code and its output when it fails or takes over 10 minutes; its stdout is left in last_output.
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 600)
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "failed (${code}): ${ARGV}\n${out}\n${err}")
  endif()
  set(last_output "${out}" PARENT_SCOPE)
endfunction()
