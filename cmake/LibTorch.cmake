# Locates libtorch inside the Python package chosen by setup (MEGAFOLD_PYTHON) and defines
#   megafold::torch      headers + libtorch_cpu + libc10 (CPU build)
#   megafold::torch_cuda adds libtorch_cuda + libc10_cuda (CUDA build)
# We do not use TorchConfig.cmake: for a CUDA wheel it forces the CUDA toolchain on every
# build, and a CPU-only build (CI) should neither need nor load the CUDA libraries.
execute_process(
  COMMAND "${MEGAFOLD_PYTHON}" -c
    "import os,torch;print(os.path.dirname(torch.__file__));print(int(torch._C._GLIBCXX_USE_CXX11_ABI));print(torch.__version__);print(torch.version.cuda or '')"
  OUTPUT_VARIABLE _torch_info OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "cannot import torch with ${MEGAFOLD_PYTHON}; run scripts/setup.sh")
endif()
string(REPLACE "\n" ";" _torch_info "${_torch_info}")
list(GET _torch_info 0 TORCH_DIR)
list(GET _torch_info 1 TORCH_CXX11_ABI)
list(GET _torch_info 2 TORCH_VERSION_STRING)
list(LENGTH _torch_info _n)
set(TORCH_CUDA_VERSION "")
if(_n GREATER 3)
  list(GET _torch_info 3 TORCH_CUDA_VERSION)
endif()
set(TORCH_LIB_DIR "${TORCH_DIR}/lib")
message(STATUS "torch ${TORCH_VERSION_STRING} at ${TORCH_DIR} (CUDA: '${TORCH_CUDA_VERSION}')")

function(_megafold_import name file)
  add_library(${name} SHARED IMPORTED GLOBAL)
  set_target_properties(${name} PROPERTIES IMPORTED_LOCATION "${TORCH_LIB_DIR}/${file}")
endfunction()
_megafold_import(megafold_imp_torch_cpu libtorch_cpu.so)
_megafold_import(megafold_imp_c10 libc10.so)

add_library(megafold_torch INTERFACE)
target_include_directories(megafold_torch SYSTEM INTERFACE
  "${TORCH_DIR}/include" "${TORCH_DIR}/include/torch/csrc/api/include")
target_compile_definitions(megafold_torch INTERFACE _GLIBCXX_USE_CXX11_ABI=${TORCH_CXX11_ABI})
target_link_libraries(megafold_torch INTERFACE megafold_imp_torch_cpu megafold_imp_c10)
add_library(megafold::torch ALIAS megafold_torch)

if(MEGAFOLD_WITH_CUDA)
  _megafold_import(megafold_imp_torch_cuda libtorch_cuda.so)
  _megafold_import(megafold_imp_c10_cuda libc10_cuda.so)
  add_library(megafold_torch_cuda INTERFACE)
  # libtorch_cuda registers the CUDA kernels in static initialisers: keep it linked even
  # though no symbol of it is referenced directly.
  target_link_libraries(megafold_torch_cuda INTERFACE megafold_torch
    "-Wl,--no-as-needed" megafold_imp_torch_cuda megafold_imp_c10_cuda "-Wl,--as-needed"
    CUDA::cudart)
  target_compile_definitions(megafold_torch_cuda INTERFACE MEGAFOLD_CUDA=1 USE_CUDA=1)
  add_library(megafold::torch_cuda ALIAS megafold_torch_cuda)
endif()
