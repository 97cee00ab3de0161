// Splits a byte stream into lines; chunks may cut lines anywhere.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace fcc::kube {

class LineBuffer {
 public:
  void Append(std::string_view data) { buffer_.append(data); }
  // The next complete line (without "\n" or "\r\n"), if one has arrived.
  std::optional<std::string> NextLine();

 private:
  std::string buffer_;
};

}  // namespace fcc::kube
