/* spmd_test.c: sharded storages and SPMD ops through the engine, on 4
** devices (the binary re-executes itself with TORCH_TPU_NUM_DEVICES=4):
** a strict-eager op on sharded operands is one launch, results match, the
** shards and every temporary are released. */
#include <unistd.h>

#include "../engine/engine.h"
#include "test.h"

__attribute__((constructor)) static void four_devices(void) {
  const char* n = getenv("TORCH_TPU_NUM_DEVICES");
  if (n && strcmp(n, "4") == 0) return;
  setenv("TORCH_TPU_NUM_DEVICES", "4", 1);
  char* argv[] = {"spmd_test", NULL};
  execv("/proc/self/exe", argv);
  _exit(127);
}

static tpurt_arg_t targ(tpurt_tensor_t t) { return (tpurt_arg_t){.kind = TPURT_ARG_TENSOR, .u.tensor = t}; }

static const int kDevices[4] = {0, 1, 2, 3};

/* The module an SPMD program is compiled from carries Shardy's annotations
** (what XLA's current partitioner reads): the mesh as a symbol, every @main
** argument and result a closed sdy.sharding; a one-device operand is
** replicated whatever its rank. */
TEST(Spmd_AnnotatesWithShardy) {
  static const char kModule[] =
      "module @tpurt attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {\n"
      "  func.func public @main(%v0: tensor<8x4xf32>, %v1: tensor<4xf32>, %v2: tensor<f32>) -> "
      "(tensor<8x4xf32>, tensor<f32>) {\n"
      "    return %v0, %v2 : tensor<8x4xf32>, tensor<f32>\n"
      "  }\n"
      "}\n";
  pjrt_sharding_t mesh = {.num_devices = 4, .devices = {0, 1, 2, 3}, .mesh_rank = 2, .mesh_shape = {2, 2}};
  pjrt_sharding_t rows = mesh, scalar = mesh;
  rows.rank = 2;
  rows.dim_axis[0] = 1;
  rows.dim_axis[1] = -1;
  scalar.rank = 0;
  const pjrt_sharding_t* params[3] = {&rows, NULL, NULL};
  const pjrt_sharding_t* results[2] = {&rows, &scalar};
  char* text = NULL;
  size_t size = 0;
  ASSERT_OK(spmd_annotate_module(kModule, &mesh, params, 3, results, 2, &text, &size));
  static const char kWant[] =
      "module @tpurt attributes {mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32} {\n"
      "  sdy.mesh @mesh = <[\"a0\"=2, \"a1\"=2]>\n"
      "  func.func public @main(%v0: tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"a1\"}, {}]>}, "
      "%v1: tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}, "
      "%v2: tensor<f32> {sdy.sharding = #sdy.sharding<@mesh, []>}) -> "
      "(tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{\"a1\"}, {}]>}, "
      "tensor<f32> {sdy.sharding = #sdy.sharding<@mesh, []>}) {\n"
      "    return %v0, %v2 : tensor<8x4xf32>, tensor<f32>\n"
      "  }\n"
      "}\n";
  EXPECT(strcmp(text, kWant) == 0);
  if (strcmp(text, kWant) != 0) fprintf(stderr, "got:\n%s\n", text);
  EXPECT(size == strlen(kWant));
  EXPECT(strstr(text, "mhlo.sharding") == NULL);
  free(text);
  /* a sharding whose rank is not the value's is refused, not printed */
  const pjrt_sharding_t* wrong[3] = {&scalar, NULL, NULL};
  tpurt_status_t s = spmd_annotate_module(kModule, &mesh, wrong, 3, results, 2, &text, &size);
  EXPECT(s != NULL && text == NULL);
  tpurt_status_free(s);
}

TEST(Spmd_ShardedOpsMatchAndRelease) {
  ASSERT(tpurt_device_count() == 4);
  float a[8 * 4], b[4 * 3];
  for (int i = 0; i < 32; ++i) a[i] = (float)i * 0.5f - 4.0f;
  for (int i = 0; i < 12; ++i) b[i] = (float)(i % 5) - 2.0f;
  const int64_t sa[2] = {8, 4}, sb[2] = {4, 3}, mesh[2] = {2, 2};
  tpurt_tensor_t ta = test_upload_f32(a, 2, sa), tb = test_upload_f32(b, 2, sb);
  const int8_t axes[2] = {0, 1};
  const tpurt_sharding_spec_t spec = {4, kDevices, 2, mesh, axes};
  ASSERT_OK(tpurt_tensor_shard(&ta, &spec));
  EXPECT(tpurt_storage_num_shards(ta.storage) == 4 && tpurt_storage_num_shards(tb.storage) == 0);
  EXPECT(tpurt_memory_allocated(3) == 8 * 4 * 4 / 4); /* a quarter of a on device 3, nothing else */
  tpurt_metrics_reset();
  tpurt_arg_t args[2] = {targ(ta), targ(tb)};
  tpurt_result_t results[4];
  tpurt_op_call_t call = {
      .name = "aten::mm", .args = args, .num_args = 2, .results = results, .max_results = 4};
  ASSERT_OK(tpurt_op_run(&call));
  tpurt_metrics_t m;
  tpurt_metrics_get(&m);
  EXPECT(m.executions == 1 && m.spmd_compiles == 1);
  tpurt_tensor_t tc = {.storage = results[0].storage, .dtype = TPURT_DTYPE_F32, .rank = 2};
  tc.sizes[0] = 8;
  tc.sizes[1] = 3;
  tc.strides[0] = 3;
  tc.strides[1] = 1;
  float c[24];
  ASSERT_OK(tpurt_tensor_read_host(&tc, c, sizeof(c)));
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 3; ++j) {
      float e = 0;
      for (int k = 0; k < 4; ++k) e += a[i * 4 + k] * b[k * 3 + j];
      EXPECT(fabsf(c[i * 3 + j] - e) < 1e-5f);
    }
  }
  /* in place, many times: the same plan, no growth */
  for (int k = 0; k < 200; ++k) {
    tpurt_arg_t inplace[3] = {targ(ta),
                              {.kind = TPURT_ARG_SCALAR, .u.scalar = {.dtype = TPURT_DTYPE_F64, .f = 1.0}},
                              {.kind = TPURT_ARG_SCALAR, .u.scalar = {.dtype = TPURT_DTYPE_I64, .i = 1}}};
    inplace[0].is_write = true;
    tpurt_op_call_t add = {
        .name = "aten::add_.Scalar", .args = inplace, .num_args = 3, .results = results, .max_results = 4};
    ASSERT_OK(tpurt_op_run(&add));
  }
  EXPECT(tpurt_storage_num_shards(ta.storage) == 4);
  float back[32];
  ASSERT_OK(tpurt_tensor_read_host(&ta, back, sizeof(back)));
  for (int i = 0; i < 32; ++i) EXPECT(back[i] == a[i] + 200.0f);
  /* two meshes in one op */
  const int other_devices[4] = {3, 2, 1, 0};
  const int64_t line[1] = {4};
  const int8_t rows[2] = {0, -1};
  const tpurt_sharding_spec_t other = {4, other_devices, 1, line, rows};
  tpurt_tensor_t td = test_upload_f32(a, 2, sa);
  ASSERT_OK(tpurt_tensor_shard(&td, &other));
  tpurt_arg_t mixed[3] = {
      targ(ta), targ(td), {.kind = TPURT_ARG_SCALAR, .u.scalar = {.dtype = TPURT_DTYPE_I64, .i = 1}}};
  tpurt_op_call_t bad = {
      .name = "aten::add.Tensor", .args = mixed, .num_args = 3, .results = results, .max_results = 4};
  EXPECT_STATUS(tpurt_op_run(&bad), TPURT_INVALID_ARGUMENT);
  /* a dim not divisible by its axis */
  const int64_t odd[2] = {3, 4};
  tpurt_tensor_t te = test_upload_f32(a, 2, odd);
  EXPECT_STATUS(tpurt_tensor_shard(&te, &other), TPURT_INVALID_ARGUMENT);
  ASSERT_OK(tpurt_synchronize(-1));
  tpurt_storage_release(tc.storage);
  tpurt_storage_release(ta.storage);
  tpurt_storage_release(tb.storage);
  tpurt_storage_release(td.storage);
  tpurt_storage_release(te.storage);
  tpurt_metrics_get(&m);
  EXPECT(m.live_storages == 0 && m.live_buffers == 0);
  for (int d = 0; d < 4; ++d) EXPECT(tpurt_memory_allocated(d) == 0);
}

TEST_MAIN(TEST_CASE(Spmd_AnnotatesWithShardy), TEST_CASE(Spmd_ShardedOpsMatchAndRelease))
