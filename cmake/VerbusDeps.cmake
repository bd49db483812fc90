# SPDX-License-Identifier: MIT
# Dependencies through pkg-config. A missing one stops configuration with the
# Debian package that provides it.
find_package(PkgConfig)
if(NOT PKG_CONFIG_FOUND)
  message(FATAL_ERROR "pkg-config not found: install the Debian package 'pkg-config' "
                      "(or run scripts/install-deps.sh)")
endif()

function(verbus_require_pkg target module debpkg)
  pkg_check_modules(${target} QUIET IMPORTED_TARGET GLOBAL ${module})
  if(NOT ${target}_FOUND)
    message(FATAL_ERROR "verbus needs ${module} (pkg-config module '${module}' not found): "
                        "install the Debian package '${debpkg}' (apt-get install ${debpkg}) "
                        "or run scripts/install-deps.sh")
  endif()
  message(STATUS "verbus: ${module} ${${target}_VERSION}")
endfunction()

verbus_require_pkg(VB_IBVERBS  libibverbs   libibverbs-dev)
verbus_require_pkg(VB_RDMACM   librdmacm    librdmacm-dev)
verbus_require_pkg(VB_URCU     liburcu-memb liburcu-dev)
verbus_require_pkg(VB_JEMALLOC jemalloc     libjemalloc-dev)
# peer authentication (vb_ctx_attr_t.auth_key): HMAC-SHA512-256, random nonces
verbus_require_pkg(VB_SODIUM   libsodium    libsodium-dev)
if(VERBUS_TESTS)
  verbus_require_pkg(VB_CMOCKA cmocka libcmocka-dev)
endif()
find_package(Threads REQUIRED)
