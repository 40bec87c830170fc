// doctest's implementation and main(), compiled once for the CPU-side suites
// (ssu_doctest_main in meson.build). Each suite used to define
// DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN itself and so compiled these few thousand
// lines again: about 20 s per suite, nine suites, in each of CI's builds.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
