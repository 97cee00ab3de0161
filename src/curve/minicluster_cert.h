// The cert a MiniCluster gets: its keypair rendered as curve.cert.
#pragma once

#include <string>

#include "curve/keys.h"
#include "curve/secret.h"

namespace fcc::curve {

// Its bytes are what every node writes for the MiniCluster.
struct MiniClusterCert {
  MiniClusterId id;
  std::string public_z85;  // not secret; for logs and checks
  Secret text;             // the whole curve.cert file
};

// Pure: the cert for `id` under `master_key`. Throws what DeriveKeypair and
// RenderCert throw; their messages never hold key material.
MiniClusterCert MakeMiniClusterCert(const Secret& master_key,
                                    const MiniClusterId& id);

}  // namespace fcc::curve
