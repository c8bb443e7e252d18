# run_fuzzer.cmake — runs one libFuzzer binary for SECONDS on a fresh copy of its seed corpus in
# WORK (the checked-in seeds are never modified) and fails if it reports anything.
#   cmake -DFUZZER=bin -DSEEDS=dir -DWORK=dir -DSECONDS=n -P run_fuzzer.cmake
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK}/corpus ${WORK}/artifacts)
file(GLOB seeds ${SEEDS}/*)
if(seeds)
  file(COPY ${seeds} DESTINATION ${WORK}/corpus)
endif()
execute_process(
  COMMAND ${FUZZER} -max_total_time=${SECONDS} -timeout=10 -rss_limit_mb=2048
          -print_final_stats=1 -artifact_prefix=${WORK}/artifacts/ ${WORK}/corpus
  RESULT_VARIABLE rc)
file(GLOB findings ${WORK}/artifacts/*)
if(NOT rc EQUAL 0 OR findings)
  message(FATAL_ERROR "${FUZZER}: exit ${rc}, findings: ${findings}")
endif()
