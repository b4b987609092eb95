# Helpers shared by every component's CMakeLists.txt.

set(DTRAIN_ROOT "${CMAKE_CURRENT_SOURCE_DIR}")
set(DTRAIN_WARNINGS -Wall -Wextra -Wno-unused-parameter)
if(DTRAIN_WERROR)
  list(APPEND DTRAIN_WARNINGS -Werror)
endif()

# LibTorch's headers are heavy; one precompiled header target is reused by all
# torch-using targets (REUSE_FROM) so they are parsed once per build.
set(DTRAIN_PCH_HEADERS <torch/torch.h>)
set(_dtrain_pch_owner "" CACHE INTERNAL "")

# dtrain_library(NAME SOURCES ... [PLAIN_SOURCES ...] [DEPS ...] [TORCH] [UNITY])
#   A static library for one component. TORCH: links LibTorch and shares the
#   precompiled torch header. PLAIN_SOURCES: sources of a TORCH library that
#   include no LibTorch header, compiled without the precompiled one (Note
#   [Sources without LibTorch]). UNITY: SOURCES are compiled a few to a
#   translation unit when DTRAIN_UNITY_BUILD is ON (Note [Unity batches]).
function(dtrain_library name)
  cmake_parse_arguments(A "TORCH;UNITY" "" "SOURCES;PLAIN_SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SOURCES} ${A_PLAIN_SOURCES})
  # Note [Sources without LibTorch]
  # The precompiled <torch/torch.h> is not free for a source that uses none of
  # it: GCC instantiates the templates the header's inline functions name at
  # the end of every translation unit that includes it, about 5 s of CPU for
  # an empty file on LibTorch 2.11 (-ftime-report: "template instantiation"
  # under "phase lang. deferred"), several times what such a source costs on
  # its own. They are listed apart and skip it.
  if(A_PLAIN_SOURCES)
    set_source_files_properties(${A_PLAIN_SOURCES} PROPERTIES SKIP_PRECOMPILE_HEADERS ON
                                                               SKIP_UNITY_BUILD_INCLUSION ON)
  endif()
  # Note [Unity batches]
  # That end-of-unit instantiation is paid once per translation unit, so a
  # unit of several sources pays it once: dtrain_train's 10 LibTorch sources
  # cost 104 s of CPU one by one, 35 s in batches of 6 and 4, 25 s as one unit
  # (LibTorch 2.11, -O3, /usr/bin/time, no ccache). Batches of
  # DTRAIN_UNITY_BATCH keep two cores busy. Every component opts in (UNITY),
  # and the dtrain executable does the same (src/cli): the `dtrain` target is
  # 63 build steps instead of 123. A unit's sources share one anonymous
  # namespace, so no two may define the same name there or as static: a
  # helper two sources need lives once in a header (ps's seconds()), and a
  # same-named local is renamed (cli's join_flags_group).
  if(A_UNITY AND DTRAIN_UNITY_BUILD)
    set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${DTRAIN_UNITY_BATCH})
  endif()
  # Note [Private src]
  # Only include/dtrain is a public include directory: a program linking
  # dtrain::dtrain (examples/, users' applications) sees the public API and
  # nothing else. src/ is private to each component (components may use each
  # other's internal headers, e.g. common/strings.h), to the dtrain
  # executable, and to the tests (white-box), which add it themselves.
  target_include_directories(${name} PUBLIC ${DTRAIN_ROOT}/include ${CMAKE_BINARY_DIR}/generated
                                     PRIVATE ${DTRAIN_ROOT}/src)
  target_compile_options(${name} PRIVATE ${DTRAIN_WARNINGS})
  target_link_libraries(${name} PUBLIC ${A_DEPS} Threads::Threads)
  if(A_TORCH)
    target_link_libraries(${name} PUBLIC torch)
    dtrain_use_torch_pch(${name})
  endif()
endfunction()

# Attach the shared LibTorch precompiled header to a target.
function(dtrain_use_torch_pch name)
  if(NOT DTRAIN_USE_PCH)
    return()
  endif()
  get_property(owner GLOBAL PROPERTY DTRAIN_PCH_OWNER)
  if(NOT owner)
    target_precompile_headers(${name} PRIVATE ${DTRAIN_PCH_HEADERS})
    set_property(GLOBAL PROPERTY DTRAIN_PCH_OWNER ${name})
  else()
    target_precompile_headers(${name} REUSE_FROM ${owner})
  endif()
endfunction()

# dtrain_test(NAME SOURCES ... DEPS ... [LABELS ...] [TIMEOUT s] [COST c]
#             [RESOURCE_LOCK name])
#   A GoogleTest executable; each TEST becomes a ctest test (discovered before
#   running, so the build never executes test binaries), or the program is
#   one (Note [One process a program]). Those labelled unit
#   are also built by the target dtrain_unit_tests.
#   COST: ctest starts tests of higher cost first (Note [Long tests first]).
#   RESOURCE_LOCK: no two tests holding the same lock run at once; ctest runs
#   another test in the free slot instead of a test that would wait.
#   NO_UNITY: compile each source on its own (Note [Tests built cheaply]).
#   Tests may include tests/ and src/ headers by their paths from there
#   ("support/shell.h", "launch/launch_test_util.h").
#
# Note [One process a program]
# ctest runs each discovered TEST in a process of its own, and a process that
# loads LibTorch spends about a second of CPU before main() (its operator
# registrations; 0.9 s for a test program here): the 907 tests of the 1.13
# build's `ctest -L unit` spent about 14 minutes of CPU on that alone, and 787
# of them took under 2 s in all. With
# DTRAIN_CTEST_PER_PROGRAM=ON each test program is one ctest test that runs
# all its TESTs in one process (GoogleTest's own output names each; a failure
# names the program in ctest's list and the TEST in its output), with a limit
# of DTRAIN_PROGRAM_TIMEOUT seconds (or its TIMEOUT, when longer) for the
# whole program. scripts/test.sh, and so CI, uses it for both builds; a build
# configured without it keeps a ctest test per TEST (`ctest -R` one TEST).
#
# Note [Long tests first]
# Without timings of an earlier run (CI's machine is cold), `ctest -j2` starts
# tests in the order they were added, so the suite's minutes-long tests
# (3-epoch trainings, the install's example builds) started last and ran on
# alone after everything else. Their binaries give ctest a COST of about
# their seconds, so they start first and the short tests fill the other slot
# around them. Once ctest has its own timings (Testing/Temporary), those win.
#
# Note [Tests built cheaply]
# Compiling the test programs was more than half of a cold build, and CI
# builds them twice (2.11 and 1.13). Rebuilt without ccache on two cores, the
# 2.11 build's test steps took 735 s (1,447 CPU-s) one source a unit at -O3,
# and take 302 s (586 CPU-s) with the two changes below, neither of which
# touches what a test runs against:
# - Unity batches (Note [Unity batches]): a program's sources are compiled a
#   few to a unit, so LibTorch's end-of-unit instantiation and GoogleTest's
#   headers are paid once a unit (test_image's 7 sources: 55 CPU-s one by
#   one, 18.5 as one unit). The same rule as the libraries': no two sources
#   of a program may define the same name in their anonymous namespaces;
#   shared helpers live in tests/support/ or the component's test header.
#   NO_UNITY keeps a program out (no program needs it today). test_ps's 15
#   torch-free sources: 56 CPU-s one by one, 24 in three units with the link.
# - -O1 instead of the build type's -O3 for the test programs' own code
#   (DTRAIN_TEST_OPTIMIZE; test_launch: 81 -> 53 CPU-s): the code under test
#   is the libraries', still built with the build type's flags. -O1 keeps
#   __OPTIMIZE__ defined, so the -O3 precompiled header stays valid
#   (-Winvalid-pch says nothing).
set(DTRAIN_TEST_OPTIMIZE -O1 CACHE STRING
  "Optimisation of the test programs' own sources in Release builds (Note [Tests built cheaply])")
set(DTRAIN_PROGRAM_TIMEOUT 1200 CACHE STRING
  "With DTRAIN_CTEST_PER_PROGRAM: the limit for one test program's run, s")

function(dtrain_test name)
  cmake_parse_arguments(A "NO_UNITY" "TIMEOUT;COST;RESOURCE_LOCK" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 120)
  endif()
  if(NOT A_LABELS)
    set(A_LABELS unit)
  endif()
  add_executable(${name} ${A_SOURCES})
  if("unit" IN_LIST A_LABELS)
    # Collected into the target dtrain_unit_tests (what `ctest -L unit` runs).
    set_property(GLOBAL APPEND PROPERTY DTRAIN_UNIT_TESTS ${name})
  endif()
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gtest GTest::gtest_main)
  # Tests may use internal headers (Note [Private src]) and the shared test
  # helpers.
  target_include_directories(${name} PRIVATE ${DTRAIN_ROOT}/src ${DTRAIN_ROOT}/tests)
  target_compile_options(${name} PRIVATE ${DTRAIN_WARNINGS}
    $<$<OR:$<CONFIG:Release>,$<CONFIG:RelWithDebInfo>,$<CONFIG:MinSizeRel>>:${DTRAIN_TEST_OPTIMIZE}>)
  # Note [Tests built cheaply]
  if(DTRAIN_UNITY_BUILD AND NOT A_NO_UNITY)
    set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${DTRAIN_UNITY_BATCH})
  endif()
  target_compile_definitions(${name} PRIVATE
    DTRAIN_BINARY_DIR="${CMAKE_BINARY_DIR}" DTRAIN_SOURCE_DIR="${DTRAIN_ROOT}")
  # GoogleTest's discovery drops the escaping of a list inside PROPERTIES, so
  # the labels travel as one: "unit;data" -> "unit_data". ctest -L takes a
  # regular expression, so both `-L unit` and `-L data` still select it.
  string(REPLACE ";" "_" labels "${A_LABELS}")
  # Listing a suite starts the program, which under load (or with a large
  # LibTorch) takes longer than CMake's default of 5 s.
  set(extra)
  if(A_COST)
    list(APPEND extra COST ${A_COST})
  endif()
  if(A_RESOURCE_LOCK)
    list(APPEND extra RESOURCE_LOCK ${A_RESOURCE_LOCK})
  endif()
  if(DTRAIN_CTEST_PER_PROGRAM)  # Note [One process a program]
    set(program_timeout ${DTRAIN_PROGRAM_TIMEOUT})
    if(A_TIMEOUT GREATER program_timeout)
      set(program_timeout ${A_TIMEOUT})
    endif()
    add_test(NAME ${name} COMMAND ${name})
    set_tests_properties(${name} PROPERTIES LABELS "${labels}"
      TIMEOUT ${program_timeout} ${extra})
  else()
    gtest_discover_tests(${name} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 120
      PROPERTIES LABELS "${labels}" TIMEOUT ${A_TIMEOUT} ${extra})
  endif()
endfunction()
