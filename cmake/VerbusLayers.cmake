# SPDX-License-Identifier: MIT
# One target per layer, dependencies pointing down only (docs/architecture.md,
# "Layers and how they are checked"):
#   verbus_core (core/) < verbus_transport (transport/) < verbus_engine
#   (engine/) < verbus_proto (proto/) < verbus_api (api/)
#
# verbus_layer(<target> <dir>) gives <target> the include root of its layer:
# a directory in the build tree holding one symbolic link, <dir> -> the
# layer's source directory. Sources keep including "core/x.h"-style paths,
# but a target sees only its own root and, through its links
# (target_link_libraries), the roots of the layers below: an upward #include
# does not compile. It also writes layers/<dir>.objects (the target's object
# files) for scripts/check-layers.sh, which checks calls (nm) as well, and
# compiles the target's objects for the shared library (VerbusCodegen.cmake).
set(VERBUS_LAYER_INCLUDE ${PROJECT_BINARY_DIR}/layer-include)

function(verbus_layer target dir)
  set(root ${VERBUS_LAYER_INCLUDE}/${dir})
  file(MAKE_DIRECTORY ${root})
  file(CREATE_LINK ${PROJECT_SOURCE_DIR}/${dir} ${root}/${dir} SYMBOLIC)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${root}>)
  verbus_lto_objects(${target})
  verbus_codegen(${target})
  file(GENERATE OUTPUT ${PROJECT_BINARY_DIR}/layers/${dir}.objects
       CONTENT "$<JOIN:$<TARGET_OBJECTS:${target}>,\n>\n")
endfunction()
