# Writes one manual page: BIN --help-man > OUT (deploy/CMakeLists.txt runs it at build time).
execute_process(COMMAND ${BIN} --help-man OUTPUT_FILE ${OUT} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  file(REMOVE ${OUT})
  message(FATAL_ERROR "${BIN} --help-man failed: ${rc}")
endif()
