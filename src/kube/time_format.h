// The two time formats of the Kubernetes API, always UTC.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace fcc::kube {

// metav1.Time: RFC 3339 to the second ("2026-12-01T21:04:30Z").
std::string FormatTime(std::chrono::system_clock::time_point t);

// metav1.MicroTime: RFC 3339 with microseconds (Leases, Events).
std::string FormatMicroTime(std::chrono::system_clock::time_point t);

// A metav1.Time as FormatTime writes it; nullopt for any other text.
std::optional<std::chrono::system_clock::time_point> ParseTime(
    std::string_view text);

}  // namespace fcc::kube
