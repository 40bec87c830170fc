// ssu.h must compile as C++17 (-std=c++17 -Wall -Wextra -Werror -pedantic,
// set in tests/meson.build), and its SSU_*_INIT macros must work in C++
// (no designated initializers before C++20) with the same values as in C.
#include "ssu.h"

#include <cstdio>
#include <cstring>
#include <type_traits>

static int failures = 0;

#define EXPECT(cond)                                                        \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                           \
    }                                                                       \
  } while (0)

// The descriptors are plain C structs: trivially copyable, standard layout.
static_assert(std::is_trivially_copyable<ssu_tensor_t>::value, "ssu_tensor_t is POD");
static_assert(std::is_standard_layout<ssu_update_args_t>::value, "ssu_update_args_t is POD");
static_assert(std::is_trivially_copyable<ssu_update_args_t>::value, "ssu_update_args_t is POD");
static_assert(std::is_trivially_copyable<ssu_state_pool_t>::value, "ssu_state_pool_t is POD");
static_assert(offsetof(ssu_update_args_t, struct_size) == 0, "struct_size comes first");
static_assert(offsetof(ssu_state_pool_t, struct_size) == 0, "struct_size comes first");
static_assert(offsetof(ssu_context_options_t, struct_size) == 0, "struct_size comes first");
static_assert(offsetof(ssu_plan_options_t, struct_size) == 0, "struct_size comes first");
static_assert(offsetof(ssu_plan_info_t, struct_size) == 0, "struct_size comes first");

int main() {
  const ssu_state_pool_t pool = SSU_STATE_POOL_INIT;
  const ssu_context_options_t copts = SSU_CONTEXT_OPTIONS_INIT;
  const ssu_plan_options_t popts = SSU_PLAN_OPTIONS_INIT;
  const ssu_plan_info_t info = SSU_PLAN_INFO_INIT;
  const ssu_update_args_t args = SSU_UPDATE_ARGS_INIT;
  auto in_cxx_init = SSU_UPDATE_ARGS_INIT;  // usable as an expression
  static_assert(std::is_same<decltype(in_cxx_init), ssu_update_args_t>::value, "type");

  EXPECT(pool.struct_size == sizeof(ssu_state_pool_t) && pool.reserved0 == 0);
  EXPECT(pool.state.data == nullptr && pool.state.ndim == 0);
  EXPECT(copts.struct_size == sizeof(ssu_context_options_t));
  EXPECT(copts.backend == SSU_BACKEND_AUTO && copts.device_ordinal == 0 && copts.num_threads == 0);
  EXPECT(popts.struct_size == sizeof(ssu_plan_options_t) && popts.algorithm == SSU_ALGORITHM_AUTO);
  EXPECT(info.struct_size == sizeof(ssu_plan_info_t) && info.algorithm_name == nullptr);
  EXPECT(args.struct_size == sizeof(ssu_update_args_t) && args.pad_slot_id == -1);
  EXPECT(args.flags == 0 && args.max_tokens == 0 && args.pool == nullptr);
  EXPECT(args.x.data == nullptr && args.error_word == nullptr);
  EXPECT(in_cxx_init.pad_slot_id == -1);

  EXPECT(ssu_version() == SSU_VERSION);
  EXPECT(std::strcmp(ssu_status_string(SSU_SUCCESS), "") != 0);
  ssu_context_t ctx = nullptr;
  ssu_context_options_t o = SSU_CONTEXT_OPTIONS_INIT;
  o.backend = SSU_BACKEND_CPU;
  o.num_threads = 1;
  EXPECT(ssu_context_create(&o, &ctx) == SSU_SUCCESS);
  ssu_backend_t b = SSU_BACKEND_AUTO;
  EXPECT(ssu_context_get_backend(ctx, &b) == SSU_SUCCESS && b == SSU_BACKEND_CPU);
  EXPECT(ssu_context_destroy(ctx) == SSU_SUCCESS);

  if (failures) std::fprintf(stderr, "%d failure(s)\n", failures);
  else std::printf("header_cxx17: ok\n");
  return failures ? 1 : 0;
}
