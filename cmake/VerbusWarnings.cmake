# SPDX-License-Identifier: MIT
set(VERBUS_WARNING_FLAGS -Wall -Wextra -Wshadow -Wformat=2 -Wmissing-prototypes
    -Wstrict-prototypes -Wpointer-arith -Wvla -Wno-unused-parameter)
if(VERBUS_WERROR)
  list(APPEND VERBUS_WARNING_FLAGS -Werror)
endif()

function(verbus_warnings target)
  target_compile_options(${target} PRIVATE ${VERBUS_WARNING_FLAGS})
endfunction()

if(VERBUS_SANITIZE)
  message(STATUS "verbus: sanitizers ${VERBUS_SANITIZE}")
  add_compile_options(-fsanitize=${VERBUS_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${VERBUS_SANITIZE})
endif()
