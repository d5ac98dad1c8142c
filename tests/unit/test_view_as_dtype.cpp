// view_as_dtype: a stored tensor's bytes read as another dtype, in place (little-endian), its
// lifetime, and its record-time errors.
#include <cstring>

#include "test_util.hpp"

using namespace kfuse;

namespace {

// view_as_dtype: the bytes of a stored tensor read as another dtype (little-endian), in place.
TEST(ViewAsDtype, ReadsTheBytesInPlace) {
  const std::vector<float> f = {1.0f, -2.5f, 0.0f, 3.0e-39f, 6.0f, 1.0e10f};
  Tensor x = Tensor::from_vector(f, {2, 3});
  Tensor bytes = view_as_dtype(x, DType::U8);
  ASSERT_EQ(bytes.shape(), (Shape{2, 12}));
  ASSERT_EQ(bytes.dtype(), DType::U8);
  EXPECT_EQ(bytes.data(), x.data());  // no copy
  std::vector<uint8_t> want(24);
  std::memcpy(want.data(), f.data(), 24);
  EXPECT_EQ(bytes.to_vector<uint8_t>(), want);
  // ... and back, through a view of the bytes that a kernel reads (a slice, then arithmetic)
  Tensor back = view_as_dtype(bytes, DType::F32);
  EXPECT_EQ(back.to_vector<float>(), f);
  EXPECT_EQ((slice(back, {Range::all(), Range{1, 3}}) * 2.0f).to_vector<float>(),
            (std::vector<float>{-5.0f, 0.0f, 12.0f, 2.0e10f}));
  // a lazily computed input is evaluated first; i64 as pairs of i32; f32 as f16 pairs
  Tensor i =
      view_as_dtype(Tensor::from_vector(std::vector<int64_t>{1, -1, int64_t{5} << 32}, {3}) + int64_t{0}, DType::I32);
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{1, 0, -1, -1, 0, 5}));
  EXPECT_EQ(view_as_dtype(Tensor::from_vector(std::vector<float>{1.0f}, {1}), DType::F16).to_vector<float>(),
            (std::vector<float>{0.0f, 1.875f}));  // 0x3f800000: f16 0x0000 then 0x3f80
}

TEST(ViewAsDtype, OutlivesItsSourceAndKeepsABorrowedOne) {
  Tensor v;
  {
    Tensor x = Tensor::from_vector(std::vector<int32_t>{7, 8, 9, 10}, {4}) * 2;
    v = view_as_dtype(x, DType::I64);
  }
  EXPECT_EQ(v.to_vector<int64_t>(), (std::vector<int64_t>{(int64_t{16} << 32) | 14, (int64_t{20} << 32) | 18}));
  std::vector<uint8_t> user = {0, 0, 128, 63, 0, 0, 0, 64};  // 1.0f, 2.0f
  EXPECT_EQ(view_as_dtype(Tensor::borrow(user.data(), {2, 4}), DType::F32).to_vector<float>(),
            (std::vector<float>{1.0f, 2.0f}));
}

TEST(ViewAsDtype, ErrorsNameTheFix) {
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const UserError& e) { return std::string(e.what()); }
    return std::string("(no error)");
  };
  EXPECT_NE(message([&] { view_as_dtype(x, DType::F64); }).find("12 bytes, not a whole number of 8-byte"),
            std::string::npos);
  EXPECT_NE(message([&] { view_as_dtype(x, DType::Bool); }).find("bool"), std::string::npos);
  EXPECT_NE(message([&] { view_as_dtype(x > 1.0f, DType::U8); }).find("bool"), std::string::npos);
  EXPECT_NE(message([&] { view_as_dtype(scalar(1.0), DType::U8); }).find("0-d"), std::string::npos);
  EXPECT_THROW(view_as_dtype(Tensor(), DType::U8), UserError);
}

}  // namespace
