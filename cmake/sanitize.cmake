# Sanitizer builds of dtrain's own code (docs/fuzzing.md).
#
#   -DDTRAIN_SANITIZE=ON  AddressSanitizer + UndefinedBehaviorSanitizer on every
#                         dtrain target (scripts/sanitize.sh: the unit tests)
#   -DDTRAIN_FUZZ=ON      the same plus libFuzzer's coverage instrumentation and
#                         the targets in fuzz/ (scripts/fuzz.sh); needs clang
#
# Note [Sanitizers beside an uninstrumented LibTorch]
# LibTorch, gloo, protobuf and the other prebuilt libraries are not rebuilt:
# ASan still sees every heap allocation (it replaces malloc process-wide) and
# checks every access made by dtrain's code; accesses inside LibTorch go
# unchecked. UBSan's vptr check is off: it needs RTTI of LibTorch's classes
# compiled with -fsanitize=vptr and reports false positives without it.
option(DTRAIN_SANITIZE "Build dtrain's code with ASan+UBSan (LibTorch uninstrumented)" OFF)
option(DTRAIN_FUZZ "Build the libFuzzer targets in fuzz/ (clang; implies DTRAIN_SANITIZE)" OFF)

if(DTRAIN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "DTRAIN_FUZZ needs clang (libFuzzer): configure with "
                        "CC=clang-14 CXX=clang++-14 in a separate build folder (scripts/fuzz.sh)")
  endif()
  set(DTRAIN_SANITIZE ON)
  add_compile_options(-fsanitize=fuzzer-no-link)
endif()
if(DTRAIN_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-sanitize=vptr
                      -fno-sanitize-recover=undefined -fno-omit-frame-pointer -g)
  add_link_options(-fsanitize=address,undefined)
  add_compile_definitions(DTRAIN_SANITIZE=1)
endif()
