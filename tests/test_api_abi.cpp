// The option structs' ABI: an *_init never writes past the struct the caller
// declared (older headers declare smaller ones), zeroes a newer caller's
// unknown fields, and a struct whose unknown fields are set is refused.
#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <string>

#include "ge_v2_api.h"
#include "support/api_helpers.hpp"

using namespace ge2::test;

namespace {

constexpr unsigned char kGuard = 0xAB;

// A caller's struct of `size` bytes inside a guarded buffer.
template <typename T>
struct Guarded {
  alignas(16) std::array<unsigned char, sizeof(T) + 64> bytes;
  Guarded() { bytes.fill(kGuard); }
  T* get() { return reinterpret_cast<T*>(bytes.data()); }
  // Bytes from `from` on that are still the guard.
  bool untouched_from(std::size_t from) const {
    for (std::size_t i = from; i < bytes.size(); ++i)
      if (bytes[i] != kGuard) return false;
    return true;
  }
  bool zero_between(std::size_t from, std::size_t to) const {
    for (std::size_t i = from; i < to; ++i)
      if (bytes[i] != 0) return false;
    return true;
  }
  std::uint32_t struct_size() const {
    std::uint32_t size = 0;
    std::memcpy(&size, bytes.data(), sizeof(size));
    return size;
  }
};

// The sized init of T: older, current and newer callers' sizes.
template <typename T, typename Init, typename Legacy>
void check_init(Init init_sized, Legacy legacy_init, std::size_t oldest, const char* name) {
  CAPTURE(name);
  {
    Guarded<T> older;
    REQUIRE(init_sized(older.get(), oldest) == GE2_OK);
    CHECK(older.struct_size() == oldest);
    CHECK(older.untouched_from(oldest));
  }
  {
    Guarded<T> newer;
    REQUIRE(init_sized(newer.get(), sizeof(T) + 24) == GE2_OK);
    CHECK(newer.struct_size() == sizeof(T) + 24);
    CHECK(newer.zero_between(sizeof(T), sizeof(T) + 24));
    CHECK(newer.untouched_from(sizeof(T) + 24));
  }
  {
    // The exported 2.2 entry point fills exactly the 2.2 struct (today's).
    Guarded<T> legacy;
    REQUIRE(legacy_init(legacy.get()) == GE2_OK);
    CHECK(legacy.struct_size() == sizeof(T));
    CHECK(legacy.untouched_from(sizeof(T)));
  }
  Guarded<T> bad;
  CHECK(init_sized(bad.get(), oldest - 1) == GE2_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(ge2_last_error())
            .find("argument 'struct_size' = " + std::to_string(oldest - 1)) != std::string::npos);
  CHECK(init_sized(bad.get(), std::size_t{1} << 20) == GE2_ERROR_INVALID_ARGUMENT);
  CHECK(bad.untouched_from(0));
  CHECK(init_sized(nullptr, sizeof(T)) == GE2_ERROR_INVALID_ARGUMENT);
  CHECK(legacy_init(nullptr) == GE2_ERROR_INVALID_ARGUMENT);
}

}  // namespace

TEST_CASE("abi: *_init never writes past the caller's struct and zeroes a newer caller's fields") {
  check_init<ge2_context_options_t>(ge2_context_options_init_sized, (ge2_context_options_init),
                                    offsetof(ge2_context_options_t, tunedb_path) + sizeof(void*),
                                    "context options (2.0)");
  check_init<ge2_compile_options_t>(ge2_compile_options_init_sized, (ge2_compile_options_init),
                                    offsetof(ge2_compile_options_t, force_kernel) + sizeof(void*),
                                    "compile options (2.0)");
  check_init<ge2_gemm_attrs_t>(ge2_gemm_attrs_init_sized, (ge2_gemm_attrs_init),
                               sizeof(ge2_gemm_attrs_t), "gemm attrs");
  check_init<ge2_gemm_params_t>(ge2_gemm_params_init_sized, (ge2_gemm_params_init),
                                sizeof(ge2_gemm_params_t), "gemm params");
}

TEST_CASE("abi: a newer caller's struct works while its unknown fields are zero, else is refused") {
  // Context options as a newer header might declare them: one more field.
  struct NewerContextOptions {
    ge2_context_options_t known;
    std::uint64_t unknown;
  };
  NewerContextOptions newer;
  REQUIRE(ge2_context_options_init(&newer.known) == GE2_OK);  // the macro: sizeof(known)
  REQUIRE(ge2_context_options_init_sized(&newer.known, sizeof newer) == GE2_OK);
  CHECK(newer.unknown == 0);
  newer.known.device = GE2_DEVICE_CPU;
  ge2_context_t* context = nullptr;
  REQUIRE(ge2_context_create(GE2_API_VERSION, &newer.known, &context) == GE2_OK);
  ge2_context_destroy(context);
  context = nullptr;
  newer.unknown = 7;
  CHECK(ge2_context_create(GE2_API_VERSION, &newer.known, &context) == GE2_ERROR_INVALID_ARGUMENT);
  const std::string message = ge2_last_error();
  CHECK(message.find("argument 'options'") != std::string::npos);
  CHECK(message.find("newer ge_v2_api.h") != std::string::npos);
  CHECK(context == nullptr);

  // The same for the compile options, through a real compile.
  auto cpu = make_context(GE2_DEVICE_CPU);
  auto graph = make_graph();
  const ge2_tensor_desc_t d{GE2_DTYPE_F32, 2, {4, 4, 0}, {0, 0, 0}};
  ge2_value_t a, b, out;
  REQUIRE(ge2_graph_add_input(graph.get(), "a", &d, &a) == GE2_OK);
  REQUIRE(ge2_graph_add_input(graph.get(), "b", &d, &b) == GE2_OK);
  REQUIRE(ge2_graph_add_gemm(graph.get(), a, b, GE2_NO_VALUE, nullptr, &out) == GE2_OK);
  REQUIRE(ge2_graph_mark_output(graph.get(), out, "out", nullptr) == GE2_OK);
  struct NewerCompileOptions {
    ge2_compile_options_t known;
    std::uint32_t unknown[4];
  };
  NewerCompileOptions compile;
  REQUIRE(ge2_compile_options_init_sized(&compile.known, sizeof compile) == GE2_OK);
  ge2_plan_t* plan = nullptr;
  REQUIRE(ge2_plan_compile(cpu.get(), graph.get(), &compile.known, &plan) == GE2_OK);
  ge2_plan_destroy(plan);
  plan = nullptr;
  compile.unknown[3] = 1;
  CHECK(ge2_plan_compile(cpu.get(), graph.get(), &compile.known, &plan) ==
        GE2_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(ge2_last_error()).find("newer ge_v2_api.h") != std::string::npos);
  CHECK(plan == nullptr);
}
