# SPDX-License-Identifier: MIT
# Link-time optimisation (docs/benchmarks.md, "Link-time optimisation"):
# the library's objects carry GCC's intermediate code beside their machine
# code (-ffat-lto-objects), and two links use it: libverbus.so (what
# programs run) and vb_bench (the main job's binary, on the static
# library). It inlines across the layers' files: a publish or a delivery
# makes about a hundred calls, and a call is what costs on a busy core.
# Every other link (tests, examples, vb_stat) takes the machine code as
# compiled, with no link-time pass, and scripts/check-layers.sh and
# unused-modules read the objects' symbols as before.
#
# On with GCC in a non-Debug, non-sanitizer build; -DVERBUS_LTO=OFF turns
# it off (scripts/scan-build.sh does: the analyser wants plain compiles).
option(VERBUS_LTO "Link-time optimisation of libverbus.so and vb_bench (GCC)" ON)
set(VERBUS_LTO_ACTIVE OFF)
if(VERBUS_LTO AND CMAKE_C_COMPILER_ID STREQUAL "GNU" AND NOT VERBUS_SANITIZE
   AND NOT CMAKE_BUILD_TYPE STREQUAL "Debug")
  include(CheckIPOSupported)
  check_ipo_supported(RESULT _vb_ipo OUTPUT _vb_ipo_out LANGUAGES C)
  # its test project's objects are not the library's (unused-modules)
  file(REMOVE_RECURSE ${PROJECT_BINARY_DIR}/CMakeFiles/_CMakeLTOTest-C)
  if(_vb_ipo)
    set(VERBUS_LTO_ACTIVE ON)
    message(STATUS "verbus: link-time optimisation of libverbus.so and vb_bench")
    # GCC runs the link-time pass on any link that meets intermediate
    # code unless told not to, and a -fno-lto anywhere on a link's
    # command line wins over -flto: every link but verbus_lto_link's
    # gets it
    add_link_options("$<$<NOT:$<BOOL:$<TARGET_PROPERTY:VERBUS_LTO_LINK>>>:-fno-lto>")
  else()
    message(STATUS "verbus: no link-time optimisation: ${_vb_ipo_out}")
  endif()
endif()

# verbus_lto_objects(<target>): its objects serve both kinds of link
function(verbus_lto_objects target)
  if(VERBUS_LTO_ACTIVE)
    target_compile_options(${target} PRIVATE -flto=auto -ffat-lto-objects)
  endif()
endfunction()

# verbus_lto_link(<target>): linked with the link-time pass
function(verbus_lto_link target)
  if(VERBUS_LTO_ACTIVE)
    set_property(TARGET ${target} PROPERTY VERBUS_LTO_LINK ON)
    target_link_options(${target} PRIVATE -flto=auto)
  endif()
endfunction()

# verbus_lto_strip_installed(<static library file name>): the installed
# static library keeps only the machine code, as dh_strip leaves Debian's
# (a program linked against it needs no particular GCC, and runs no
# link-time pass it did not ask for)
function(verbus_lto_strip_installed file)
  if(NOT VERBUS_LTO_ACTIVE)
    return()
  endif()
  if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
    set(dir "${CMAKE_INSTALL_LIBDIR}")
  else() # the prefix of the install, which `cmake --install --prefix` sets
    set(dir "\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}")
  endif()
  install(CODE "execute_process(COMMAND \"${CMAKE_OBJCOPY}\" -R .gnu.lto_* -R .gnu.debuglto_*
    -N __gnu_lto_v1 -N __gnu_lto_slim \"\$ENV{DESTDIR}${dir}/${file}\"
    COMMAND_ERROR_IS_FATAL ANY)")
endfunction()
