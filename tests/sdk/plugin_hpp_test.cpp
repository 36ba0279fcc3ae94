// The C++ layer's boundary: exceptions become statuses, messages respect the caller's capacity,
// and forward arguments are validated the same way for every plugin.
#include <nibble/sdk/plugin.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using ::testing::HasSubstr;

namespace {

TEST(PluginHpp, NumericModeValuesAndTheirDeprecatedAliasesNeverChange) {
  static_assert(NIBBLE_MODE_FLOAT == 0 && NIBBLE_MODE_W4A16 == 1 && NIBBLE_MODE_W4A8 == 2);
  static_assert(NIBBLE_MODE_WEIGHT_ONLY == NIBBLE_MODE_W4A16);
  static_assert(NIBBLE_MODE_DYNAMIC_INT8 == NIBBLE_MODE_W4A8);
  SUCCEED();
}

TEST(PluginHpp, ExceptionsBecomeStatuses) {
  nibble_error e{};
  e.struct_size = sizeof e;
  EXPECT_EQ(nibble::sdk::detail::guarded(&e, [] { throw std::runtime_error("boom"); }),
            NIBBLE_INTERNAL);
  EXPECT_THAT(e.message, HasSubstr("boom"));
  EXPECT_EQ(nibble::sdk::detail::guarded(&e, [] { throw std::bad_alloc(); }), NIBBLE_OUT_OF_MEMORY);
  EXPECT_EQ(nibble::sdk::detail::guarded(&e, [] { throw 42; }), NIBBLE_INTERNAL);
  EXPECT_EQ(nibble::sdk::detail::guarded(
                &e, [] { throw nibble::sdk::PluginError(NIBBLE_UNSUPPORTED, "no 3-bit"); }),
            NIBBLE_UNSUPPORTED);
  EXPECT_STREQ(e.message, "no 3-bit");
}

TEST(PluginHpp, ErrorMessagesRespectTheCallersCapacity) {
  nibble_error e{};
  std::memset(e.message, 'G', sizeof e.message);
  e.struct_size = uint32_t(offsetof(nibble_error, message) + 8);  // an 8-byte message buffer
  nibble::sdk::write_error(&e, "a long message indeed");
  EXPECT_STREQ(e.message, "a long ");
  for (size_t i = 8; i < 16; ++i) EXPECT_EQ(e.message[i], 'G');
}

TEST(PluginHpp, ForwardArgumentsAreValidated) {
  nibble_layer_desc d{};
  d.struct_size = sizeof d;
  d.op = NIBBLE_OP_LINEAR;
  d.K = 8;
  d.N = 4;
  float xb[16] = {}, yb[8] = {};
  int64_t xs[2] = {2, 8}, ys[2] = {2, 5};
  DLTensor x{xb, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, xs, nullptr, 0};
  DLTensor y{yb, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, ys, nullptr, 0};
  nibble_forward_args a{sizeof(nibble_forward_args), &x, &y, nullptr, nullptr};
  try {
    nibble::sdk::check_forward_args(d, &a);
    FAIL() << "a wrong y shape was accepted";
  } catch (const nibble::sdk::PluginError& e) {
    EXPECT_THAT(e.what(), HasSubstr("y: expected 4 columns, got 5"));
  }
  ys[1] = 4;
  x.dtype = {kDLInt, 32, 1};
  EXPECT_THROW(nibble::sdk::check_forward_args(d, &a), nibble::sdk::PluginError);
}

}  // namespace
