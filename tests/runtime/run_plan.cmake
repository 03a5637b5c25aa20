# One runtime test: plan MODEL with FAMILY on DEVICES devices of CLUSTER (partita plan), then run it
# on NP ranks with partita-run --verify (mpirun). With EXPECT_FAILURE, the run must fail and its
# output must match EXPECT_FAILURE (a regex).
# -D PARTITA=... RUNTIME=... MPIEXEC=... MODEL=... CLUSTER=... DEVICES=... FAMILY=... NP=... WORKDIR=...
#    [EXTRA_ARGS="--iterations;2"] [PLAN_ARGS="--tp|2"] [EXPECT_FAILURE=regex] [EXPECT_OUTPUT=regex]
foreach(var PARTITA RUNTIME MPIEXEC MODEL CLUSTER DEVICES FAMILY NP WORKDIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_plan.cmake: -D${var}= is required")
  endif()
endforeach()
file(MAKE_DIRECTORY ${WORKDIR})
string(REPLACE "|" ";" PLAN_ARGS "${PLAN_ARGS}")
set(plan ${WORKDIR}/plan.json)
execute_process(
  COMMAND ${PARTITA} plan ${MODEL} --cluster ${CLUSTER} --devices ${DEVICES} --strategy ${FAMILY} ${PLAN_ARGS} -o ${plan}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "partita plan failed (${rc}):\n${out}\n${err}")
endif()
# --timeout: a rank that hangs ends the whole job (mpirun kills it), the test then fails.
execute_process(
  COMMAND ${MPIEXEC} --timeout 90 -np ${NP} ${RUNTIME} ${plan} --verify --warmup 0 ${EXTRA_ARGS}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
message("${out}${err}")
if(DEFINED EXPECT_FAILURE)
  if(rc EQUAL 0)
    message(FATAL_ERROR "partita-run succeeded but was expected to fail")
  endif()
  if(NOT "${out}${err}" MATCHES "${EXPECT_FAILURE}")
    message(FATAL_ERROR "partita-run failed without the expected message '${EXPECT_FAILURE}'")
  endif()
  return()
endif()
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "partita-run failed (${rc})")
endif()
if(NOT out MATCHES "verify: PASSED")
  message(FATAL_ERROR "partita-run did not report 'verify: PASSED'")
endif()
if(DEFINED EXPECT_OUTPUT AND NOT out MATCHES "${EXPECT_OUTPUT}")
  message(FATAL_ERROR "partita-run's output does not match '${EXPECT_OUTPUT}'")
endif()
if(DEFINED TRACE)
  file(READ ${TRACE} trace)
  string(JSON events LENGTH "${trace}" traceEvents)
  if(events LESS 10)
    message(FATAL_ERROR "trace ${TRACE} has only ${events} events")
  endif()
endif()
