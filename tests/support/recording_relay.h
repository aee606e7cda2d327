// RecordingRelay: a loopback TCP relay for one connection, which records
// each read of either side's bytes as the Cap'n Proto RPC message types it
// completed. Tests use it to see how the messages of a real client and the
// real dispatcher travel (e.g. that a Finish rides with the next call instead
// of costing the peer a read and a wake-up of its own).
#pragma once

#include <capnp/rpc.capnp.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dispatch::testing {

class RecordingRelay {
 public:
  // The RPC message types completed by one read.
  using Chunk = std::vector<capnp::rpc::Message::Which>;
  enum class From { kClient, kServer };

  // Listens on a free loopback port; relays the first connection accepted
  // there to `target` ("tcp:host:port"), both ways, on its own thread.
  explicit RecordingRelay(const std::string& target);
  ~RecordingRelay();
  RecordingRelay(const RecordingRelay&) = delete;
  RecordingRelay& operator=(const RecordingRelay&) = delete;

  // "tcp:127.0.0.1:PORT", for the client.
  const std::string& address() const { return address_; }
  std::vector<Chunk> chunks(From from);
  // Why the relay stopped early (empty: it did not).
  std::string failure();

  static bool Has(const Chunk& chunk, capnp::rpc::Message::Which type);
  static size_t Count(const std::vector<Chunk>& chunks, capnp::rpc::Message::Which type);

 private:
  void Run();
  void Relay();
  // Decodes the whole messages `pending` holds once `data` is added.
  void Record(From from, std::string& pending, const char* data, size_t size);

  const std::string target_;
  int listener_ = -1;
  int stop_[2] = {-1, -1};
  std::string address_;
  std::mutex mu_;
  std::vector<Chunk> chunks_[2];
  std::string failure_;
  std::thread thread_;
};

}  // namespace dispatch::testing
