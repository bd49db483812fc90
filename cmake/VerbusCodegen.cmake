# SPDX-License-Identifier: MIT
# How the library's objects are compiled for the shared library
# (docs/benchmarks.md, "The shared library's hot path"). Every object goes
# into libverbus.so and libverbus.a alike, position-independent; in a shared
# library three things then cost a call or an indirect jump each time,
# which a program linked against the static library does not pay (the
# linker resolves them there):
#   -ftls-model=initial-exec  a thread-local variable is reached at a fixed
#       offset from the thread pointer, not through __tls_get_addr() (the
#       default for position-independent code: a call per access, and a
#       vb_progress() round makes several). The cost: the library's
#       thread-locals (1 KiB) live in the static TLS block, so a dlopen()
#       of libverbus.so needs room there. It needs it already for
#       libjemalloc, whose 2.6 KiB of thread-locals are initial-exec; the
#       README gives the setting (install_test's dlopen consumer uses it).
#       liburcu's thread-local, which core/rcu.c reads, stays
#       global-dynamic (declared so there): forced into the static block,
#       liburcu-memb.so would not load by dlopen() at all.
#   -fno-plt  a call into libibverbs, liburcu or pthreads goes through the
#       GOT directly instead of a PLT stub's extra jump (those GOT entries
#       are resolved when the library is loaded, not at the first call).
#   -fno-semantic-interposition  the exported vb_* functions may be called
#       and inlined inside the library as any other.
include(CheckCCompilerFlag)
set(VERBUS_CODEGEN_FLAGS "")
foreach(_vb_flag -ftls-model=initial-exec -fno-plt -fno-semantic-interposition)
  string(MAKE_C_IDENTIFIER "VB_HAS${_vb_flag}" _vb_var)
  check_c_compiler_flag(${_vb_flag} ${_vb_var})
  if(${_vb_var})
    list(APPEND VERBUS_CODEGEN_FLAGS ${_vb_flag})
  endif()
endforeach()

# verbus_codegen(<target>): the library's objects (verbus_layer)
function(verbus_codegen target)
  target_compile_options(${target} PRIVATE ${VERBUS_CODEGEN_FLAGS})
endfunction()
