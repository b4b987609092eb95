# The CPU library of a CUDA LibTorch (PyPI's torch wheel) on a machine without
# the CUDA toolkit: included by the top CMakeLists.txt instead of
# find_package(Torch) when DTRAIN_TORCH_CPU_ONLY is ON (scripts/build.sh sets
# it there), and by the installed dtrainConfig.cmake of such a build.
#
# In:  CMAKE_PREFIX_PATH holding the torch package folder (<venv>/.../torch),
#      or DTRAIN_TORCH_CPU_PREFIX set to it.
# Out: the imported target `torch` (libtorch_cpu + libc10, the wheel's headers
#      and c10d's compile definitions), TORCH_LIBRARIES, TORCH_LIBRARY,
#      TORCH_INSTALL_PREFIX, Torch_VERSION, Torch_FOUND.
#
# Note [The wheel's CPU library]
# The torch wheel is built with CUDA, and its TorchConfig.cmake insists on a
# CUDA toolkit (Caffe2Config: "uses CUDA but I cannot find the CUDA
# libraries"). Its libtorch_cpu.so and libc10.so are a complete CPU LibTorch
# (every CPU kernel, autograd, c10d with Gloo; libtorch_cuda.so only registers
# the CUDA backend when it is loaded), and they need from CUDA only
# libcudart.so.13 and libcupti.so.13 (profiling), which the
# nvidia-cuda-runtime and nvidia-cuda-cupti wheels put in nvidia/cu13/lib, a
# folder in the torch libraries' own RPATH. libtorch.so is left out: it is
# an empty library whose DT_NEEDED entries pull in libtorch_cuda.so and with
# it the GPU stack (cuBLAS, cuDNN, NCCL...). The compile definitions are
# those the wheel's Caffe2Targets.cmake gives torch_cpu.
if(NOT DTRAIN_TORCH_CPU_PREFIX)
  find_path(DTRAIN_TORCH_CPU_PREFIX NAMES lib/libtorch_cpu.so PATHS ${CMAKE_PREFIX_PATH} NO_DEFAULT_PATH
            DOC "The torch package folder whose CPU library is used (DTRAIN_TORCH_CPU_ONLY)")
endif()
if(NOT DTRAIN_TORCH_CPU_PREFIX OR NOT EXISTS "${DTRAIN_TORCH_CPU_PREFIX}/lib/libtorch_cpu.so")
  message(FATAL_ERROR "DTRAIN_TORCH_CPU_ONLY: no lib/libtorch_cpu.so in CMAKE_PREFIX_PATH (${CMAKE_PREFIX_PATH}): "
                      "put the torch package folder there (scripts/torch-wheel.sh cmake-args prints it)")
endif()
set(TORCH_INSTALL_PREFIX "${DTRAIN_TORCH_CPU_PREFIX}")
file(STRINGS "${TORCH_INSTALL_PREFIX}/include/torch/headeronly/version.h" _dtrain_torch_version_lines
     REGEX "#define TORCH_VERSION_(MAJOR|MINOR|PATCH) ")
set(Torch_VERSION "")
foreach(_part MAJOR MINOR PATCH)
  string(REGEX MATCH "TORCH_VERSION_${_part} ([0-9]+)" _m "${_dtrain_torch_version_lines}")
  list(APPEND Torch_VERSION "${CMAKE_MATCH_1}")
endforeach()
string(REPLACE ";" "." Torch_VERSION "${Torch_VERSION}")
if(NOT TARGET torch)
  add_library(dtrain_torch_c10 SHARED IMPORTED)
  set_target_properties(dtrain_torch_c10 PROPERTIES IMPORTED_LOCATION "${TORCH_INSTALL_PREFIX}/lib/libc10.so")
  add_library(dtrain_torch_cpu SHARED IMPORTED)
  set_target_properties(dtrain_torch_cpu PROPERTIES
    IMPORTED_LOCATION "${TORCH_INSTALL_PREFIX}/lib/libtorch_cpu.so"
    INTERFACE_INCLUDE_DIRECTORIES "${TORCH_INSTALL_PREFIX}/include;${TORCH_INSTALL_PREFIX}/include/torch/csrc/api/include"
    INTERFACE_COMPILE_DEFINITIONS "USE_DISTRIBUTED;USE_C10D_GLOO;USE_RPC;USE_TENSORPIPE"
    INTERFACE_LINK_LIBRARIES dtrain_torch_c10)
  add_library(torch INTERFACE IMPORTED)
  set_target_properties(torch PROPERTIES INTERFACE_LINK_LIBRARIES dtrain_torch_cpu)
endif()
set(TORCH_LIBRARY "${TORCH_INSTALL_PREFIX}/lib/libtorch_cpu.so")
set(TORCH_LIBRARIES torch)
set(Torch_FOUND TRUE)
