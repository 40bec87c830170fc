/* ssu.h must compile as strict C99 (-std=c99 -Wall -Wextra -Werror -pedantic,
 * set in tests/meson.build) and its SSU_*_INIT macros must give zeroed
 * structs with struct_size set (and pad_slot_id = -1 for update args). */
#include "ssu.h"

#include <stdio.h>
#include <string.h>

static int failures = 0;

#define EXPECT(cond)                                             \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                \
    }                                                            \
  } while (0)

/* Every byte after struct_size (and the fields named) must be zero. */
static int all_zero(const void* p, size_t from, size_t to) {
  const unsigned char* b = (const unsigned char*)p;
  size_t i;
  for (i = from; i < to; ++i)
    if (b[i] != 0) return 0;
  return 1;
}

int main(void) {
  ssu_state_pool_t pool = SSU_STATE_POOL_INIT;
  ssu_context_options_t copts = SSU_CONTEXT_OPTIONS_INIT;
  ssu_plan_options_t popts = SSU_PLAN_OPTIONS_INIT;
  ssu_plan_info_t info = SSU_PLAN_INFO_INIT;
  ssu_update_args_t args = SSU_UPDATE_ARGS_INIT;
  ssu_tensor_t tensor;
  ssu_context_t ctx = NULL;
  ssu_plan_t plan = NULL;
  ssu_stream_t stream = NULL;
  ssu_status_t st;

  EXPECT(pool.struct_size == sizeof(ssu_state_pool_t));
  EXPECT(pool.state.data == NULL && pool.state_scale.data == NULL && pool.reserved0 == 0);
  EXPECT(copts.struct_size == sizeof(ssu_context_options_t));
  EXPECT(copts.backend == SSU_BACKEND_AUTO && copts.device_ordinal == 0 && copts.num_threads == 0);
  EXPECT(popts.struct_size == sizeof(ssu_plan_options_t));
  EXPECT(popts.algorithm == SSU_ALGORITHM_AUTO);
  EXPECT(info.struct_size == sizeof(ssu_plan_info_t));
  EXPECT(info.algorithm_name == NULL);
  EXPECT(args.struct_size == sizeof(ssu_update_args_t));
  EXPECT(args.pad_slot_id == -1);
  EXPECT(args.flags == 0 && args.max_tokens == 0 && args.pool == NULL);
  EXPECT(args.x.data == NULL && args.out.data == NULL && args.error_word == NULL);
  EXPECT(all_zero(&args, offsetof(ssu_update_args_t, pool),
                  offsetof(ssu_update_args_t, error_word)));

  memset(&tensor, 0, sizeof tensor);
  EXPECT(SSU_MAX_DIMS == 6);
  EXPECT(sizeof(tensor.shape) / sizeof(tensor.shape[0]) == SSU_MAX_DIMS);
  EXPECT(sizeof(ssu_status_t) == 4 && sizeof(ssu_dtype_t) == 4 && sizeof(ssu_backend_t) == 4);
  EXPECT(SSU_VERSION == SSU_VERSION_MAJOR * 10000 + SSU_VERSION_MINOR * 100 + SSU_VERSION_PATCH);
  EXPECT(SSU_STATUS_FAMILY(SSU_ERROR_BAD_STRIDE) == 1);

  /* Link and call through the C ABI. */
  EXPECT(ssu_version() == SSU_VERSION);
  EXPECT(strcmp(ssu_dtype_name(SSU_DTYPE_BF16), "bf16") == 0);
  copts.backend = SSU_BACKEND_CPU;
  copts.num_threads = 1;
  st = ssu_context_create(&copts, &ctx);
  EXPECT(st == SSU_SUCCESS);
  EXPECT(ssu_plan_execute_update(plan, &args, stream) == SSU_ERROR_BAD_HANDLE);
  EXPECT(ssu_context_destroy(ctx) == SSU_SUCCESS);
  (void)pool;

  if (failures) fprintf(stderr, "%d failure(s)\n", failures);
  else printf("header_c99: ok\n");
  return failures ? 1 : 0;
}
