#include "observe/proto.h"

#include <cstring>

namespace dtrain::detail {

void ProtoWriter::raw_varint(uint64_t value) {
  while (value >= 0x80) {
    out_.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out_.push_back(static_cast<char>(value));
}

void ProtoWriter::raw_fixed64(uint64_t bits) {
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void ProtoWriter::tag(int field, int wire_type) {
  raw_varint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

void ProtoWriter::varint_field(int field, uint64_t value) {
  tag(field, 0);
  raw_varint(value);
}

void ProtoWriter::double_field(int field, double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  tag(field, 1);
  raw_fixed64(bits);
}

void ProtoWriter::float_field(int field, float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  tag(field, 5);
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
}

void ProtoWriter::bytes_field(int field, std::string_view bytes) {
  tag(field, 2);
  raw_varint(bytes.size());
  out_.append(bytes.data(), bytes.size());
}

void ProtoWriter::packed_doubles(int field, const std::vector<double>& values) {
  tag(field, 2);
  raw_varint(values.size() * 8);
  for (double v : values) {
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    raw_fixed64(bits);
  }
}

}  // namespace dtrain::detail
