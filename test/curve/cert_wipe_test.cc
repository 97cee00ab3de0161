// RenderCert never frees a buffer that holds the secret key unwiped. A test
// of its own: it replaces the global operator delete to look into every
// block freed while RenderCert runs.
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "curve/cert.h"

namespace {

std::atomic<bool> armed{false};
// The secret key being looked for; a fixed array, never on the heap.
char needle[41];
std::atomic<int> unwiped_frees{0};

void Inspect(void* block) {
  if (!armed.load() || block == nullptr) return;
  const size_t size = malloc_usable_size(block);
  if (memmem(block, size, needle, 40) != nullptr) ++unwiped_frees;
}

}  // namespace

// new is replaced too, so that every delete here frees what malloc gave
// (under ASan the library's new and this free would not pair).
void* operator new(size_t size) {
  if (void* block = std::malloc(size == 0 ? 1 : size)) return block;
  throw std::bad_alloc();
}

void operator delete(void* block) noexcept {
  Inspect(block);
  std::free(block);
}
void operator delete(void* block, size_t) noexcept {
  Inspect(block);
  std::free(block);
}

namespace fcc::curve {
namespace {

// The positive control: a heap copy of the secret key freed unwiped is
// counted. Without it, a hook that never sees a delete (a new that is not
// ours, a needle never set) would let the test below pass on any RenderCert.
// (It leaves the count at 0 for the test below.)
TEST(RenderCertWipe, AControlCopyOfTheSecretFreedUnwipedIsCounted) {
  const CurveKeypair keys = DeriveKeypair(Secret(std::string(32, 'm')),
                                          MiniClusterId{"default", "a", ""});
  std::memcpy(needle, keys.secret_z85.reveal().data(), 40);
  armed = true;
  {
    // 40 bytes: past the small-string buffer, so on the heap.
    const std::string copy(keys.secret_z85.reveal());
    // Keeps the compiler from eliding the allocation.
    asm volatile("" : : "g"(copy.data()) : "memory");
  }
  armed = false;
  EXPECT_EQ(unwiped_frees.exchange(0), 1);
}

TEST(RenderCertWipe, NoLengthOfNameLeavesTheSecretInFreedMemory) {
  const CurveKeypair keys = DeriveKeypair(Secret(std::string(32, 'm')),
                                          MiniClusterId{"default", "a", ""});
  std::memcpy(needle, keys.secret_z85.reveal().data(), 40);
  // Every length up to well past the lengths that once reallocated
  // (47, 48, 303, 304: growth beyond a fixed reserve).
  for (size_t length = 1; length <= 700; ++length) {
    const std::string name = "ns." + std::string(length, 'n');
    armed = true;
    {
      const Secret cert = RenderCert(name, keys);
    }
    armed = false;
    ASSERT_EQ(unwiped_frees.load(), 0) << "name length " << length;
  }
}

}  // namespace
}  // namespace fcc::curve
