#include "curve/minicluster_cert.h"

#include "curve/cert.h"

namespace fcc::curve {

MiniClusterCert MakeMiniClusterCert(const Secret& master_key,
                                    const MiniClusterId& id) {
  const CurveKeypair keys = DeriveKeypair(master_key, id);
  return MiniClusterCert{.id = id,
                         .public_z85 = keys.public_z85,
                         .text = RenderCert(id.QualifiedName(), keys)};
}

}  // namespace fcc::curve
