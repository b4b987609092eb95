#pragma once
// A minimal protocol-buffers encoder: just what TensorBoard's Event and
// Summary messages need (varints, 64/32-bit fixed fields, length-delimited
// fields, packed doubles). Torch-free; no descriptor, no reflection.
//
// Usage:
//   ProtoWriter value;
//   value.string_field(1, "loss");
//   value.float_field(2, 0.5f);
//   ProtoWriter summary;
//   summary.message_field(1, value);

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::detail {

/// Appends fields in wire format to a byte string. Not thread-safe.
class ProtoWriter {
 public:
  /// Wire type 0 (int32, int64, uint64, bool, enum). Negative values take
  /// ten bytes, as protobuf encodes them.
  void varint_field(int field, uint64_t value);
  /// Wire type 1 (double).
  void double_field(int field, double value);
  /// Wire type 5 (float).
  void float_field(int field, float value);
  /// Wire type 2 (string, bytes).
  void bytes_field(int field, std::string_view bytes);
  void string_field(int field, std::string_view text) { bytes_field(field, text); }
  void message_field(int field, const ProtoWriter& message) { bytes_field(field, message.bytes()); }
  /// A packed repeated double (one length-delimited field of fixed64s).
  void packed_doubles(int field, const std::vector<double>& values);

  const std::string& bytes() const { return out_; }

 private:
  void tag(int field, int wire_type);
  void raw_varint(uint64_t value);
  void raw_fixed64(uint64_t bits);

  std::string out_;
};

}  // namespace dtrain::detail
