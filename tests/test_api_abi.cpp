// The option structs' ABI: an *_init never writes past the struct the caller
// declared (older headers declare smaller ones), and a struct larger than the
// library's (a newer header's) is refused without reading beyond the library's.
#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

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
  std::uint32_t struct_size() const {
    std::uint32_t size = 0;
    std::memcpy(&size, bytes.data(), sizeof(size));
    return size;
  }
};

// The sized init of T: older, current and newer callers' sizes.
// `legacy`: the size the exported 2.2 entry point fills (the struct as 2.2 declared it).
template <typename T, typename Init, typename Legacy>
void check_init(Init init_sized, Legacy legacy_init, std::size_t oldest, std::size_t legacy,
                const char* name) {
  CAPTURE(name);
  {
    Guarded<T> older;
    REQUIRE(init_sized(older.get(), oldest) == GE2_OK);
    CHECK(older.struct_size() == oldest);
    CHECK(older.untouched_from(oldest));
  }
  {
    Guarded<T> current;
    REQUIRE(init_sized(current.get(), sizeof(T)) == GE2_OK);
    CHECK(current.struct_size() == sizeof(T));
    CHECK(current.untouched_from(sizeof(T)));
    Guarded<T> newer;
    CHECK(init_sized(newer.get(), sizeof(T) + 24) == GE2_ERROR_INVALID_ARGUMENT);
    CHECK(std::string(ge2_last_error()).find("newer ge_v2_api.h") != std::string::npos);
    CHECK(newer.untouched_from(0));
  }
  {
    // The exported 2.2 entry point fills exactly the 2.2 struct.
    Guarded<T> old_binary;
    REQUIRE(legacy_init(old_binary.get()) == GE2_OK);
    CHECK(old_binary.struct_size() == legacy);
    CHECK(old_binary.untouched_from(legacy));
  }
  Guarded<T> bad;
  CHECK(init_sized(bad.get(), oldest - 1) == GE2_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(ge2_last_error())
            .find("argument 'struct_size' = " + std::to_string(oldest - 1)) != std::string::npos);
  CHECK(bad.untouched_from(0));
  CHECK(init_sized(nullptr, sizeof(T)) == GE2_ERROR_INVALID_ARGUMENT);
  CHECK(legacy_init(nullptr) == GE2_ERROR_INVALID_ARGUMENT);
}

}  // namespace

TEST_CASE("abi: *_init never writes past the caller's struct; a newer caller's size is refused") {
  check_init<ge2_context_options_t>(ge2_context_options_init_sized, (ge2_context_options_init),
                                    offsetof(ge2_context_options_t, tunedb_path) + sizeof(void*),
                                    offsetof(ge2_context_options_t, log_callback),
                                    "context options (2.0, 2.2)");
  check_init<ge2_compile_options_t>(ge2_compile_options_init_sized, (ge2_compile_options_init),
                                    offsetof(ge2_compile_options_t, force_kernel) + sizeof(void*),
                                    offsetof(ge2_compile_options_t, fp8_max_error),
                                    "compile options (2.0, 2.2)");
  check_init<ge2_gemm_attrs_t>(ge2_gemm_attrs_init_sized, (ge2_gemm_attrs_init),
                               sizeof(ge2_gemm_attrs_t), sizeof(ge2_gemm_attrs_t), "gemm attrs");
  check_init<ge2_gemm_params_t>(ge2_gemm_params_init_sized, (ge2_gemm_params_init),
                                sizeof(ge2_gemm_params_t), sizeof(ge2_gemm_params_t),
                                "gemm params");
}

TEST_CASE("abi: a struct_size larger than the library's is refused, nothing beyond it read") {
  // As a caller built against a newer header passes it; the library cannot know
  // how much memory is really there, so it reads none of it.
  ge2_context_options_t options;
  REQUIRE(ge2_context_options_init(&options) == GE2_OK);
  options.device = GE2_DEVICE_CPU;
  options.struct_size = sizeof(options) + 8;
  ge2_context_t* context = nullptr;
  CHECK(ge2_context_create(GE2_API_VERSION, &options, &context) == GE2_ERROR_INVALID_ARGUMENT);
  const std::string message = ge2_last_error();
  CHECK(message.find("argument 'options'") != std::string::npos);
  CHECK(message.find("struct_size = " + std::to_string(sizeof(options) + 8)) != std::string::npos);
  CHECK(message.find("newer ge_v2_api.h") != std::string::npos);
  CHECK(context == nullptr);
  options.struct_size = 0xFFFFFFFFu;  // what the C API fuzzer sent
  CHECK(ge2_context_create(GE2_API_VERSION, &options, &context) == GE2_ERROR_INVALID_ARGUMENT);

  // The same for the compile options, through a real compile.
  auto cpu = make_context(GE2_DEVICE_CPU);
  auto graph = make_graph();
  const ge2_tensor_desc_t d{GE2_DTYPE_F32, 2, {4, 4, 0}, {0, 0, 0}};
  ge2_value_t a, b, out;
  REQUIRE(ge2_graph_add_input(graph.get(), "a", &d, &a) == GE2_OK);
  REQUIRE(ge2_graph_add_input(graph.get(), "b", &d, &b) == GE2_OK);
  REQUIRE(ge2_graph_add_gemm(graph.get(), a, b, GE2_NO_VALUE, nullptr, &out) == GE2_OK);
  REQUIRE(ge2_graph_mark_output(graph.get(), out, "out", nullptr) == GE2_OK);
  ge2_compile_options_t compile;
  REQUIRE(ge2_compile_options_init(&compile) == GE2_OK);
  ge2_plan_t* plan = nullptr;
  REQUIRE(ge2_plan_compile(cpu.get(), graph.get(), &compile, &plan) == GE2_OK);
  ge2_plan_destroy(plan);
  plan = nullptr;
  compile.struct_size += 4;
  CHECK(ge2_plan_compile(cpu.get(), graph.get(), &compile, &plan) == GE2_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(ge2_last_error()).find("newer ge_v2_api.h") != std::string::npos);
  CHECK(plan == nullptr);
}

TEST_CASE("log callback: AUTO on the CPU says so through the context's callback, at its level") {
  std::vector<std::pair<ge2_log_level_t, std::string>> received;
  ge2_context_options_t options;
  REQUIRE(ge2_context_options_init(&options) == GE2_OK);
  CHECK((options.log_callback == nullptr));
  CHECK(options.log_level == GE2_LOG_DEFAULT);
  options.device = GE2_DEVICE_AUTO;
  options.tunedb_path = "";
  options.log_user_data = &received;
  options.log_callback = [](void* user, ge2_log_level_t level, const char* message) {
    static_cast<std::vector<std::pair<ge2_log_level_t, std::string>>*>(user)->emplace_back(level,
                                                                                           message);
  };
  options.log_level = GE2_LOG_WARNING;
  ge2_context_t* context = nullptr;
  REQUIRE(ge2_context_create(GE2_API_VERSION, &options, &context) == GE2_OK);
  ge2_device_kind_t kind = GE2_DEVICE_AUTO;
  REQUIRE(ge2_context_get_device_kind(context, &kind) == GE2_OK);
  ge2_context_destroy(context);
  if (kind == GE2_DEVICE_CPU) {
    REQUIRE(received.size() == 1);
    CHECK(received[0].first == GE2_LOG_WARNING);
    CHECK(received[0].second.find("device AUTO") != std::string::npos);
    CHECK(received[0].second.find("CPU reference backend") != std::string::npos);
  } else {
    CHECK(received.empty());  // AUTO found a device: nothing to report
  }
  received.clear();
  options.log_level = GE2_LOG_ERROR;  // the fallback is a warning: filtered out
  REQUIRE(ge2_context_create(GE2_API_VERSION, &options, &context) == GE2_OK);
  ge2_context_destroy(context);
  CHECK(received.empty());

  // A 2.2 caller's struct (filled by the 2.2 entry point) has no log members: defaults.
  ge2_context_options_t old_caller;
  REQUIRE((ge2_context_options_init)(&old_caller) == GE2_OK);
  CHECK(old_caller.struct_size == offsetof(ge2_context_options_t, log_callback));
  old_caller.device = GE2_DEVICE_CPU;
  REQUIRE(ge2_context_create(GE2_API_VERSION, &old_caller, &context) == GE2_OK);
  ge2_context_destroy(context);

  options.log_level = static_cast<ge2_log_level_t>(9);
  context = nullptr;
  CHECK(ge2_context_create(GE2_API_VERSION, &options, &context) == GE2_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(ge2_last_error()).find("'options->log_level' = 9") != std::string::npos);
  CHECK(context == nullptr);
}
