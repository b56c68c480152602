# Which GPU architectures the CUDA code is built for. Included after
# check_language(CUDA) and before enable_language(CUDA): enable_language would
# otherwise fill CMAKE_CUDA_ARCHITECTURES with nvcc's own default (sm_75 for
# CUDA 12 and 13), and an sm_90 GPU would then run JIT-compiled compute_75
# code in which every kernel that needs sm_80 or later is compiled out.
#
# In order:
#  1. -DCMAKE_CUDA_ARCHITECTURES=... or $CUDAARCHS: as given.
#  2. a GPU visible now (nvidia-smi answers): its own architecture(s), machine
#     code only, as CMake's "native" would (done here so that CMake 3.20-3.23
#     get it too, and so that a test can show it with a stand-in nvidia-smi).
#     A GPU newer than this nvcc knows falls through to 3.
#  3. no GPU: TND_CUDA_ARCH_LIST, machine code for the common current GPUs
#     (sm_75 Turing, sm_80 A100, sm_86 RTX 30, sm_89 RTX 40 / L4, sm_90
#     H100 / H200, sm_120 RTX 50) plus compute_90 PTX, which the driver
#     compiles for any later GPU; less what this nvcc cannot build. Each
#     architecture adds about 30 s of matvec.cu on a 2-core machine.
# TND_CUDA_ARCH_SOURCE records which rule chose (given / gpu / default).
set(TND_CUDA_ARCH_LIST "75-real;80-real;86-real;89-real;90-real;120-real;90-virtual"
    CACHE STRING "CUDA architectures built when none are given and no GPU is visible")

function(tnd_choose_cuda_architectures)
  # A build folder configured before this rule holds nvcc's default, which
  # enable_language left with the help text "CUDA architectures": not given.
  if(NOT DEFINED TND_CUDA_ARCH_SOURCE AND DEFINED CACHE{CMAKE_CUDA_ARCHITECTURES})
    get_property(help CACHE CMAKE_CUDA_ARCHITECTURES PROPERTY HELPSTRING)
    if(help STREQUAL "CUDA architectures")
      message(STATUS "tandem: replacing the CUDA architectures an earlier configure took from nvcc's default")
      unset(CMAKE_CUDA_ARCHITECTURES CACHE)
    endif()
  endif()
  if(DEFINED CMAKE_CUDA_ARCHITECTURES OR DEFINED ENV{CUDAARCHS})
    if(NOT DEFINED TND_CUDA_ARCH_SOURCE)
      set(TND_CUDA_ARCH_SOURCE given CACHE INTERNAL "")
    endif()
    return()
  endif()
  # what this nvcc can build (CUDA 11.1+ lists it; older: assume all)
  execute_process(COMMAND ${CMAKE_CUDA_COMPILER} --list-gpu-code
                  OUTPUT_VARIABLE codes RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(known "")
  if(rc EQUAL 0)
    string(REGEX MATCHALL "sm_[0-9]+" known "${codes}")
  endif()
  set(archs "")
  set(source default)
  find_program(TND_NVIDIA_SMI nvidia-smi NO_CACHE)
  if(TND_NVIDIA_SMI)
    execute_process(COMMAND ${TND_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                    OUTPUT_VARIABLE caps RESULT_VARIABLE rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(rc EQUAL 0 AND caps MATCHES "^[0-9]+\\.[0-9]")
      string(REGEX MATCHALL "[0-9]+\\.[0-9]+" caps "${caps}")
      set(source gpu)
      foreach(c ${caps})
        string(REPLACE "." "" a "${c}")
        if(known AND NOT "sm_${a}" IN_LIST known)
          message(STATUS "tandem: this nvcc cannot build for the GPU's sm_${a}; using the default list")
          set(source default)
          set(archs "")
          break()
        endif()
        list(APPEND archs "${a}-real")
      endforeach()
      list(REMOVE_DUPLICATES archs)
    endif()
  endif()
  if(source STREQUAL "default")
    foreach(a ${TND_CUDA_ARCH_LIST})
      string(REGEX MATCH "^[0-9]+" n "${a}")
      if(NOT known OR "sm_${n}" IN_LIST known)
        list(APPEND archs "${a}")
      endif()
    endforeach()
  endif()
  set(CMAKE_CUDA_ARCHITECTURES "${archs}" CACHE STRING "CUDA architectures (tandem: cmake/cuda_arch.cmake)")
  set(TND_CUDA_ARCH_SOURCE ${source} CACHE INTERNAL "")
endfunction()

tnd_choose_cuda_architectures()
message(STATUS "tandem: CUDA architectures ${CMAKE_CUDA_ARCHITECTURES} (${TND_CUDA_ARCH_SOURCE})")
