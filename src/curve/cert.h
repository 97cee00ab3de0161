// curve.cert: rendering (byte-deterministic) and a strict parser that accepts
// only what flux-core's broker accepts (src/common/libzmqutil/cert.c rules).
#pragma once

#include <expected>
#include <map>
#include <string>
#include <string_view>

#include "curve/keys.h"
#include "curve/secret.h"

namespace fcc::curve {

// Renders the ZPL secret certificate Flux reads:
//   #  ZeroMQ CURVE **Secret** Certificate / #  DO NOT DISTRIBUTE / metadata
//   name = "<metadata_name>" / curve / public-key / secret-key
// A pure function of its inputs (no timestamps, hosts or versions), so all
// nodes write byte-identical files. Throws std::invalid_argument if
// `metadata_name` holds a character Flux refuses in a metadata value.
Secret RenderCert(std::string_view metadata_name, const CurveKeypair& keys);

struct ParsedCert {
  std::map<std::string, std::string> metadata;
  CurveKeypair keys;
};

// Parses `text` with flux-core's rules: lines under 255 characters; the
// section headers `metadata` and `curve` unindented; entries indented as
// key = "value" (key chars [A-Za-z0-9.-], value without _ , ' " \ ~ | ;);
// `curve` holds exactly public-key and secret-key, 40 Z85 characters each,
// and the pair must match. Returns a message naming the line and the rule
// on failure; the message never contains key material.
std::expected<ParsedCert, std::string> ParseCert(std::string_view text);

// True if `value` may stand in a metadata value (flux-core's valid_value).
bool IsValidMetadataValue(std::string_view value);

}  // namespace fcc::curve
