# partita-run --backend cuda on 2 ranks. Built with CUDA on a machine with a GPU: the plan runs on
# it and --verify passes. Built with CUDA without a usable GPU (cudaGetDeviceCount fails or finds
# none): every rank refuses before anything starts, the lowest rank printing the reason once.
# Built without CUDA: the same refusal, saying so.
# -D PARTITA=... RUNTIME=... MPIEXEC=... MODEL=... WORKDIR=... BUILT_WITH_CUDA=ON|OFF
file(MAKE_DIRECTORY ${WORKDIR})
set(plan ${WORKDIR}/plan.json)
execute_process(COMMAND ${PARTITA} plan ${MODEL} --cluster dgx-a100 --devices 2 --strategy dp -o ${plan}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "partita plan failed (${rc}):\n${out}\n${err}")
endif()
execute_process(COMMAND ${MPIEXEC} --timeout 90 -np 2 ${RUNTIME} ${plan} --verify --warmup 0 --iterations 2
                        --backend cuda
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
set(all "${out}${err}")
message("${all}")
if(BUILT_WITH_CUDA)
  set(refusal "--backend cuda \\(rank 0\\): no CUDA device: cudaGetDeviceCount (returned [0-9]+ \\([^)]+\\)|found none)")
else()
  set(refusal "--backend cuda \\(rank 0\\): this partita-run was built without CUDA")
endif()
if(all MATCHES "${refusal}")
  if(rc EQUAL 0)
    message(FATAL_ERROR "partita-run refused the backend but exited 0")
  endif()
  string(REGEX MATCHALL "--backend cuda \\(rank" lines "${all}")
  list(LENGTH lines n)
  if(NOT n EQUAL 1)
    message(FATAL_ERROR "the refusal was printed ${n} times, not once (by the lowest rank)")
  endif()
  if(all MATCHES "progress:| strategy\\) on ")
    message(FATAL_ERROR "partita-run started the plan before refusing the backend")
  endif()
  return()
endif()
if(NOT BUILT_WITH_CUDA)
  message(FATAL_ERROR "a partita-run built without CUDA did not refuse --backend cuda with '${refusal}'")
endif()
# A GPU: the run must use it and verify.
if(NOT rc EQUAL 0 OR NOT out MATCHES "backend cuda \\(" OR NOT out MATCHES "verify: PASSED")
  message(FATAL_ERROR "partita-run --backend cuda neither refused cleanly nor ran and verified (${rc})")
endif()
