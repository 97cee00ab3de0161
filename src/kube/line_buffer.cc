#include "kube/line_buffer.h"

namespace fcc::kube {

std::optional<std::string> LineBuffer::NextLine() {
  const size_t newline = buffer_.find('\n');
  if (newline == std::string::npos) return std::nullopt;
  std::string line(buffer_, 0, newline);
  buffer_.erase(0, newline + 1);
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return line;
}

}  // namespace fcc::kube
