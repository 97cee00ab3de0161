// Plain TCP clients for the tests of the HTTP side-server: connections that
// are opened and then held, or that send a request a byte at a time.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <vector>

#include "common/unique_fd.h"

namespace fcc::testing {

// Opens `count` connections to 127.0.0.1:`port` without waiting for any to
// complete (the server's backlog may be full) and sends nothing on them.
std::vector<common::UniqueFd> HoldTcpConnections(int port, int count);

// Sends a request line, then one header byte every `interval`, until the
// server closes the connection or `give_up` passes. True if the server
// closed it first.
bool ServerCutsATricklingRequest(int port, std::chrono::milliseconds interval,
                                 std::chrono::milliseconds give_up);

// The number of open file descriptors of process `pid` (/proc/PID/fd).
int OpenFdCount(pid_t pid);

}  // namespace fcc::testing
