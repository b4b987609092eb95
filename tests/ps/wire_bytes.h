#pragma once
// Bytes written out one by one, for tests that check frames and varints on
// the wire: bytes({0x08, 0x96, 0x01}).

#include <initializer_list>
#include <string>

namespace dtrain::testing {

inline std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s.push_back(static_cast<char>(x));
  return s;
}

}  // namespace dtrain::testing
