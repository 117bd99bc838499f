// The CPU backend through the public API: every (dtype, bias, activation,
// transpose) combination, fused nodes and unfused chains, batches, strides.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "support/api_helpers.hpp"

using namespace ge2::test;

namespace {
std::int64_t random_size(std::int64_t low, std::int64_t high) {
  return std::uniform_int_distribution<std::int64_t>(low, high)(rng());
}
}  // namespace

TEST_CASE("cpu: every dtype x bias x activation x transpose combination matches fp64") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto memory = host_memory();
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_BF16, GE2_DTYPE_F32})
    for (bool has_bias : {false, true})
      for (ge2_activation_t act : {GE2_ACT_NONE, GE2_ACT_RELU, GE2_ACT_GELU_ERF, GE2_ACT_GELU_TANH,
                                   GE2_ACT_SILU, GE2_ACT_QUICK_GELU})
        for (bool trans_a : {false, true})
          for (bool trans_b : {false, true}) {
            GemmCase c;
            c.dtype = dtype;
            c.m = random_size(1, 37);
            c.n = random_size(1, 37);
            c.k = random_size(1, 70);
            c.has_bias = has_bias;
            c.act = act;
            c.trans_a = trans_a;
            c.trans_b = trans_b;
            c.fused_node = (random_size(0, 1) == 1);
            const auto result = run_gemm_case(context.get(), *memory, c);
            CHECK_MESSAGE(result.error <= tolerance(dtype), c.label() << " error " << result.error);
          }
}

TEST_CASE("cpu: batched, broadcast, strided and column-major operands") {
  auto context = make_context(GE2_DEVICE_CPU);
  auto memory = host_memory();
  for (ge2_dtype_t dtype : {GE2_DTYPE_F16, GE2_DTYPE_F32}) {
    GemmCase batched;
    batched.dtype = dtype;
    batched.batch = 3;
    batched.m = 17;
    batched.n = 9;
    batched.k = 33;
    batched.has_bias = true;
    batched.act = GE2_ACT_RELU;
    auto r = run_gemm_case(context.get(), *memory, batched);
    CHECK_MESSAGE(r.error <= tolerance(dtype), batched.label() << " error " << r.error);

    GemmCase padded = batched;
    padded.pad_lda = 5;
    padded.pad_ldb = 3;
    padded.pad_ldd = 7;
    padded.trans_b = true;
    r = run_gemm_case(context.get(), *memory, padded);
    CHECK_MESSAGE(r.error <= tolerance(dtype), padded.label() << " error " << r.error);
    CHECK_MESSAGE(r.padding_changed == 0, padded.label() << " wrote into D's row padding");

    GemmCase column_major = padded;
    column_major.batch = 1;
    column_major.a_column_major = true;
    column_major.act = GE2_ACT_GELU_ERF;
    r = run_gemm_case(context.get(), *memory, column_major);
    CHECK_MESSAGE(r.error <= tolerance(dtype), column_major.label() << " error " << r.error);

    GemmCase with_c;
    with_c.dtype = dtype;
    with_c.m = 12;
    with_c.n = 21;
    with_c.k = 8;
    with_c.with_c = true;
    with_c.alpha = 0.5f;
    with_c.beta = -1.5f;
    with_c.has_bias = true;
    with_c.act = GE2_ACT_GELU_TANH;
    r = run_gemm_case(context.get(), *memory, with_c);
    CHECK_MESSAGE(r.error <= tolerance(dtype), with_c.label() << " error " << r.error);
  }
}

TEST_CASE("cpu: a wrong result is detected (the oracle can fail)") {
  // Guards the harness itself: a deliberately wrong reference must exceed the bound.
  HostTensor a = make_tensor(GE2_DTYPE_F32, {4, 5});
  HostTensor b = make_tensor(GE2_DTYPE_F32, {5, 3});
  fill_random(a);
  fill_random(b);
  auto ref = gemm_reference(a, b, nullptr, nullptr, {});
  HostTensor d = make_tensor(GE2_DTYPE_F32, {4, 3});
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) d.set(d.offset(0, i, j), ref[static_cast<std::size_t>(i * 3 + j)]);
  CHECK(relative_error(d, ref) < 1e-7);
  d.set(d.offset(0, 2, 1), ref[7] + 0.5);
  CHECK(relative_error(d, ref) > 1e-3);
  poison(d);
  CHECK(relative_error(d, ref) == std::numeric_limits<double>::infinity());
}

TEST_CASE("cpu: a GEMM split over row blocks and threads equals it computed one row at a time") {
  // 203 x 300 x 150 is past the size from which the CPU GEMM uses threads, and 203
  // rows end in a partial block of 8. Each row's fp32 sums must not depend on
  // how rows are grouped, so the large call equals 203 one-row calls bit for bit.
  auto context = make_context(GE2_DEVICE_CPU);
  for (ge2_dtype_t dtype : {GE2_DTYPE_F32, GE2_DTYPE_BF16}) {
    const std::int64_t m = 203, n = 300, k = 150;
    HostTensor a = make_tensor(dtype, {m, k}), w = make_tensor(dtype, {n, k});  // nn.Linear
    HostTensor bias = make_tensor(dtype, {n}), d = make_tensor(dtype, {m, n});
    fill_random(a);
    fill_random(w);
    fill_random(bias);
    ge2_gemm_params_t p = gemm_params(dtype, m, n, k);
    p.trans_b = 1;
    p.has_bias = 1;
    p.activation = GE2_ACT_SILU;
    poison(d);
    REQUIRE_MESSAGE(ge2_gemm_bias_act(context.get(), &p, a.data(), w.data(), bias.data(), d.data(),
                                      nullptr) == GE2_OK,
                    std::string(ge2_last_error()));
    CHECK(relative_error(
              d, gemm_reference(a, w, nullptr, &bias, {false, true, 1.0, 0.0, GE2_ACT_SILU})) <=
          tolerance(dtype));
    ge2_gemm_params_t one_row = p;
    one_row.m = 1;
    HostTensor row = make_tensor(dtype, {1, n});
    int differing_rows = 0;
    for (std::int64_t i = 0; i < m; ++i) {
      poison(row);
      REQUIRE(ge2_gemm_bias_act(context.get(), &one_row,
                                a.bytes.data() + a.offset(0, i, 0) * a.element_size(), w.data(),
                                bias.data(), row.data(), nullptr) == GE2_OK);
      differing_rows +=
          std::memcmp(d.bytes.data() + d.offset(0, i, 0) * d.element_size(), row.data(),
                      static_cast<std::size_t>(n) * d.element_size()) != 0;
    }
    CHECK(differing_rows == 0);
  }
}

TEST_CASE("cpu: a few rows against an [N, K] weight read in place equal the [K, N] copy's GEMM") {
  // Up to 16 rows the CPU GEMM reads nn.Linear's [N, K] weight where it is stored
  // (threads over blocks of columns from 4 M multiply-adds); with the weight
  // transposed into [K, N] it takes the row-block path. Same sums, same bits; f16
  // also on the F16C path where the CPU has it. N = 1003: a last block of 3 columns.
  auto context = make_context(GE2_DEVICE_CPU);
  for (ge2_dtype_t dtype : {GE2_DTYPE_F32, GE2_DTYPE_BF16, GE2_DTYPE_F16})
    for (std::int64_t m : {1, 8, 16, 17}) {
      const std::int64_t n = 1003, k = 600;
      HostTensor a = make_tensor(dtype, {m, k}), w = make_tensor(dtype, {n, k});
      HostTensor w_kn = make_tensor(dtype, {k, n});
      fill_random(a);
      fill_random(w);
      for (std::int64_t j = 0; j < n; ++j)
        for (std::int64_t kk = 0; kk < k; ++kk)
          w_kn.set(w_kn.offset(0, kk, j), w.get(w.offset(0, j, kk)));
      HostTensor d = make_tensor(dtype, {m, n}), d_kn = make_tensor(dtype, {m, n});
      poison(d);
      poison(d_kn);
      ge2_gemm_params_t p = gemm_params(dtype, m, n, k);
      p.activation = GE2_ACT_GELU_ERF;
      REQUIRE(ge2_gemm_bias_act(context.get(), &p, a.data(), w_kn.data(), nullptr, d_kn.data(),
                                nullptr) == GE2_OK);
      p.trans_b = 1;
      REQUIRE(ge2_gemm_bias_act(context.get(), &p, a.data(), w.data(), nullptr, d.data(),
                                nullptr) == GE2_OK);
      CHECK(relative_error(d, gemm_reference(a, w, nullptr, nullptr,
                                             {false, true, 1.0, 0.0, GE2_ACT_GELU_ERF})) <=
            tolerance(dtype));
      CHECK_MESSAGE(d.bytes == d_kn.bytes, "m = " << m << ", dtype " << dtype);
    }
}
