# partita calibrate end to end: --quick sweeps on NP ranks (mpirun + partita-calibrate), the fit,
# the calibrated cluster file; then partita plan reads that file. Asserts the file validates, its
# figures are positive, finite and not the preset's; never how fast anything ran.
# -D PARTITA=... CALIBRATE=... MPIEXEC=... NP=... WORKDIR=...
foreach(var PARTITA CALIBRATE MPIEXEC NP WORKDIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "calibrate.cmake: -D${var}= is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORKDIR})
file(MAKE_DIRECTORY ${WORKDIR})
set(cluster ${WORKDIR}/calibrated.json)
set(ENV{PARTITA_CALIBRATE} ${CALIBRATE})
execute_process(
  COMMAND ${PARTITA} calibrate --cluster localhost-cpu -np ${NP} --quick -o ${cluster} --mpirun ${MPIEXEC}
          --work-dir ${WORKDIR} --timeout 240
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 280)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "partita calibrate failed (${rc})")
endif()
foreach(expected "# all-reduce over ${NP} ranks" "busbw" "fit: compute" "# compute: convolutions" "conv 7x7/2 3>64"
                 "fit: compute \\(convolution kernels" "compute efficiency by family" "fit: collectives" "median \\|error\\|"
                 "written to ${cluster}")
  if(NOT out MATCHES "${expected}")
    message(FATAL_ERROR "partita calibrate's output lacks '${expected}'")
  endif()
endforeach()

file(READ ${cluster} json)
# name, then (field path, the localhost-cpu preset's value)
set(figures "device.peak_fp32|7.3e10" "device.memory_bandwidth|1.0e10" "intra_node.link.bandwidth|4.0e9"
            "intra_node.link.latency|1e-6")
foreach(entry ${figures})
  string(REPLACE "|" ";" entry "${entry}")
  list(GET entry 0 path)
  list(GET entry 1 preset)
  string(REPLACE "." ";" keys "${path}")
  string(JSON value GET "${json}" ${keys})
  if(NOT value MATCHES "^[0-9.]+(e[-+]?[0-9]+)?$")
    message(FATAL_ERROR "${cluster}: ${path} = '${value}' is not a positive finite number")
  endif()
  # A latency below the timer's resolution fits as 0; every other figure must be positive.
  if((value EQUAL 0 AND NOT path MATCHES "latency") OR value EQUAL preset)
    message(FATAL_ERROR "${cluster}: ${path} = ${value} is zero or still the preset's ${preset}")
  endif()
endforeach()
string(JSON points LENGTH "${json}" device compute_efficiency)
if(points LESS 2)
  message(FATAL_ERROR "${cluster}: only ${points} compute efficiency points")
endif()
# The convolution sweep: the device has a convolution curve of its own, and the description says so.
string(JSON families ERROR_VARIABLE missing LENGTH "${json}" device compute_classes)
if(missing OR families LESS 1)
  message(FATAL_ERROR "${cluster}: no device.compute_classes (the convolution curve): ${missing}")
endif()
string(JSON family GET "${json}" device compute_classes 0 compute_class)
string(JSON points LENGTH "${json}" device compute_classes 0 compute_efficiency)
if(NOT family STREQUAL "convolution" OR points LESS 2)
  message(FATAL_ERROR "${cluster}: device.compute_classes[0] is '${family}' with ${points} points, not a convolution curve")
endif()
string(JSON description GET "${json}" description)
if(NOT description MATCHES "convolution timings")
  message(FATAL_ERROR "${cluster}: the description does not mention the convolution timings: ${description}")
endif()
if(NOT description MATCHES "Calibrated by `partita calibrate --quick` on .* ${NP} MPI rank")
  message(FATAL_ERROR "${cluster}: the description does not say how it was calibrated: ${description}")
endif()

execute_process(
  COMMAND ${PARTITA} plan "zoo:mlp?batch=64&input=256&hidden=256&layers=2&classes=16" --cluster ${cluster}
          --devices ${NP} --strategy dp
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
if(NOT rc EQUAL 0 OR NOT out MATCHES "localhost-cpu-calibrated")
  message(FATAL_ERROR "partita plan --cluster ${cluster} failed (${rc}):\n${out}\n${err}")
endif()

# Refitting the saved measurements gives the same file; a damaged measurements file is refused
# with its name and the field.
execute_process(COMMAND ${PARTITA} calibrate --cluster localhost-cpu --measurements ${WORKDIR}/measurements.json
                        -o ${WORKDIR}/refit.json RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "refitting failed (${rc}): ${err}")
endif()
# The fit's warnings (the same measurements, the same fit), kept for the curve checks below: the
# damaged file's refusal overwrites out and err.
set(fit_messages "${out}${err}")
file(READ ${WORKDIR}/refit.json refit)
if(NOT refit STREQUAL json)
  message(FATAL_ERROR "refitting ${WORKDIR}/measurements.json gave a different cluster file")
endif()
file(READ ${WORKDIR}/measurements.json measured)
string(JSON measured REMOVE "${measured}" collectives 0 seconds)
file(WRITE ${WORKDIR}/damaged.json "${measured}")
execute_process(COMMAND ${PARTITA} calibrate --measurements ${WORKDIR}/damaged.json -o ${WORKDIR}/never.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "damaged.json: field 'collectives\\[0\\]'.*seconds" OR EXISTS ${WORKDIR}/never.json)
  message(FATAL_ERROR "a damaged measurements file was not refused with its name and field (${rc}): ${err}")
endif()

# Transposes that move the last dim and copies of rows have curves of their own, or (when a busy
# machine made their timings inconsistent) the fit says so and names the curve used instead.
foreach(family copy transpose)
  if(NOT json MATCHES "\"kernel_class\": *\"${family}\"" AND NOT fit_messages MATCHES "${family} kernels use the [a-z]+ curve")
    message(FATAL_ERROR "${cluster}: no memory curve of the '${family}' kernels, and no warning saying why")
  endif()
endforeach()

# Reads of what the kernel before just wrote: ReLU and Add timed fresh beside cold give a curve.
string(JSON fresh_points ERROR_VARIABLE fresh_error LENGTH "${json}" device fresh_read)
if(fresh_error OR fresh_points LESS 2)
  message(FATAL_ERROR "${cluster}: no fresh-read curve (device.fresh_read: ${fresh_points} ${fresh_error})")
endif()
file(READ ${WORKDIR}/measurements.json measured)
if(NOT measured MATCHES "\"cold_seconds\": [^,]+,[^}]*\"kernel\": \"relu fresh\"")
  message(FATAL_ERROR "measurements.json: no 'relu fresh' timing with its cold time")
endif()
# Erf timed on fresh inputs too, and the families timed apart: Erf's and LayerNorm's backward
# passes, Softmax, the in-place add of gradients, ReLU's backward pass; each has a curve of its own or a warning that
# names the curve used instead.
if(NOT measured MATCHES "\"cold_seconds\": [^,]+,[^}]*\"kernel\": \"erf fresh\"")
  message(FATAL_ERROR "measurements.json: no 'erf fresh' timing with its cold time")
endif()
foreach(family transcendental_backward normalization_backward softmax accumulate activation_backward)
  if(NOT json MATCHES "\"kernel_class\": *\"${family}\"" AND NOT fit_messages MATCHES "${family} kernels use the [a-z]+ curve")
    message(FATAL_ERROR "${cluster}: no memory curve of the '${family}' kernels, and no warning saying why")
  endif()
endforeach()
# The products' backward passes, timed as partita-run runs them, unbatched and batched: a compute
# curve of their own each, or a warning that names the curve used instead.
foreach(entry "matmul_backward|gemm backward [0-9]" "matmul_batched_backward|gemm backward batched [0-9]")
  string(REPLACE "|" ";" entry "${entry}")
  list(GET entry 0 family)
  list(GET entry 1 kernel)
  if(NOT measured MATCHES "\"compute_class\": \"${family}\"[^}]*\"kernel\": \"${kernel}")
    message(FATAL_ERROR "measurements.json: no '${kernel}...' timing of the ${family} family")
  endif()
  if(NOT json MATCHES "\"compute_class\": *\"${family}\"" AND NOT fit_messages MATCHES "${family} ops use the")
    message(FATAL_ERROR "${cluster}: no compute curve of the ${family} kernels, and no warning saying why")
  endif()
endforeach()
# The wide GEMMs (a large weight on few rows) that tell the matmul operand term apart.
if(NOT measured MATCHES "\"kernel\": \"gemm wide [0-9]+x[0-9]+x[0-9]+\"")
  message(FATAL_ERROR "measurements.json: no 'gemm wide' timing")
endif()

# The host probe (bench/runtime_bench.py): the GEMMs, memory-bound kernels and all-reduces it times
# are named and sized as the sweeps that calibrated the file name them, so that it can set them
# side by side.
execute_process(COMMAND ${MPIEXEC} -np ${NP} ${CALIBRATE} --probe -o ${WORKDIR}/probe.json
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "partita-calibrate --probe failed (${rc}): ${err}")
endif()
file(READ ${WORKDIR}/probe.json probe)
file(READ ${WORKDIR}/measurements.json measured)
foreach(part compute memory)
  string(JSON count LENGTH "${probe}" ${part})
  if(count LESS 3)
    message(FATAL_ERROR "probe.json: only ${count} ${part} kernels")
  endif()
  math(EXPR last "${count} - 1")
  foreach(i RANGE ${last})
    string(JSON kernel GET "${probe}" ${part} ${i} kernel)
    string(JSON bytes GET "${probe}" ${part} ${i} bytes)
    string(REGEX REPLACE "\\.0$" "" bytes "${bytes}")
    string(REGEX REPLACE "([][+.*()^$?])" "\\\\\\1" kernel_pattern "${kernel}")
    if(NOT measured MATCHES "\"bytes\": ${bytes}(\\.0)?,[^}]*\"kernel\": \"${kernel_pattern}\"")
      message(FATAL_ERROR "probe.json: ${part} kernel '${kernel}' of ${bytes} bytes is not in measurements.json")
    endif()
  endforeach()
endforeach()
string(JSON count LENGTH "${probe}" collectives)
if(count LESS 3)
  message(FATAL_ERROR "probe.json: only ${count} collective timings")
endif()
math(EXPR last "${count} - 1")
foreach(i RANGE ${last})
  string(JSON collective GET "${probe}" collectives ${i} collective)
  string(JSON bytes GET "${probe}" collectives ${i} bytes)
  string(REGEX REPLACE "\\.0$" "" bytes "${bytes}")
  if(NOT collective STREQUAL "all-reduce")
    message(FATAL_ERROR "probe.json: collective '${collective}', where the probe times the all-reduce")
  endif()
  if(NOT measured MATCHES "\"bytes\": ${bytes}(\\.0)?,[^}]*\"collective\": \"all-reduce\"")
    message(FATAL_ERROR "probe.json: the all-reduce of ${bytes} bytes is not in measurements.json")
  endif()
endforeach()

# partita run --host-check (bench/runtime_bench.py retakes a run that met the host off its
# calibrated speed): the run's own GEMMs, memory-bound kernels and all-reduces, before its warm-up
# and after its timed iterations, are those the calibration timed, so that they can be set side by
# side.
execute_process(
  COMMAND ${PARTITA} run "zoo:mlp?batch=64&input=256&hidden=256&layers=2&classes=16" --cluster ${cluster} --strategy dp
          -np ${NP} --iterations 2 --warmup 1 --mpirun ${MPIEXEC} --work-dir ${WORKDIR}/host_check_run --host-check
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 150)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "partita run --host-check failed (${rc}): ${out}${err}")
endif()
file(READ ${WORKDIR}/host_check_run/host_check.json checked)
string(JSON count LENGTH "${checked}" collectives)
set(before 0)
set(after 0)
math(EXPR last "${count} - 1")
foreach(i RANGE ${last})
  string(JSON when GET "${checked}" collectives ${i} when)
  string(JSON collective GET "${checked}" collectives ${i} collective)
  string(JSON bytes GET "${checked}" collectives ${i} bytes)
  string(JSON seconds GET "${checked}" collectives ${i} seconds)
  string(REGEX REPLACE "\\.0$" "" bytes "${bytes}")
  if(NOT collective STREQUAL "all-reduce" OR NOT seconds MATCHES "^[0-9]+\\.?[0-9]*(e-?[0-9]+)?$")
    message(FATAL_ERROR "host_check.json: row ${i}: ${collective} of ${bytes} bytes in ${seconds} s")
  endif()
  if(NOT measured MATCHES "\"bytes\": ${bytes}(\\.0)?,[^}]*\"collective\": \"all-reduce\"")
    message(FATAL_ERROR "host_check.json: the all-reduce of ${bytes} bytes is not in measurements.json")
  endif()
  math(EXPR ${when} "${${when}} + 1")
endforeach()
if(before LESS 3 OR NOT after EQUAL before)
  message(FATAL_ERROR "host_check.json: ${before} all-reduces before the warm-up and ${after} after the timed "
                      "iterations, where 3 or more of each were expected")
endif()
foreach(part compute memory)
  string(JSON count LENGTH "${checked}" ${part})
  set(before 0)
  set(after 0)
  math(EXPR last "${count} - 1")
  foreach(i RANGE ${last})
    string(JSON when GET "${checked}" ${part} ${i} when)
    string(JSON kernel GET "${checked}" ${part} ${i} kernel)
    string(JSON bytes GET "${checked}" ${part} ${i} bytes)
    string(JSON seconds GET "${checked}" ${part} ${i} seconds)
    string(REGEX REPLACE "\\.0$" "" bytes "${bytes}")
    string(REGEX REPLACE "([][+.*()^$?])" "\\\\\\1" kernel_pattern "${kernel}")
    if(NOT seconds MATCHES "^[0-9]+\\.?[0-9]*(e-?[0-9]+)?$")
      message(FATAL_ERROR "host_check.json: ${part} row ${i}: '${kernel}' in ${seconds} s")
    endif()
    if(NOT measured MATCHES "\"bytes\": ${bytes}(\\.0)?,[^}]*\"kernel\": \"${kernel_pattern}\"")
      message(FATAL_ERROR "host_check.json: ${part} kernel '${kernel}' of ${bytes} bytes is not in measurements.json")
    endif()
    math(EXPR ${when} "${${when}} + 1")
  endforeach()
  if(before LESS 3 OR NOT after EQUAL before)
    message(FATAL_ERROR "host_check.json: ${before} ${part} kernels before the warm-up and ${after} after the timed "
                        "iterations, where 3 or more of each were expected")
  endif()
endforeach()
