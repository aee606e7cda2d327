// Decoding copies the bytes into word-aligned memory, reads them with limits
// derived from their size, traverses the whole message once (which is where a
// damaged pointer shows up) and only then lets the state read it.

#include "state/codec.h"

#include <capnp/dynamic.h>
#include <capnp/serialize.h>
#include <kj/exception.h>
#include <kj/io.h>

#include <cstring>
#include <functional>

namespace dispatch::state {

namespace {

constexpr int kNestingLimit = 64;

void ReadEveryField(capnp::DynamicStruct::Reader s);

void ReadValue(const capnp::DynamicValue::Reader& value) {
  switch (value.getType()) {
    case capnp::DynamicValue::STRUCT:
      ReadEveryField(value.as<capnp::DynamicStruct>());
      break;
    case capnp::DynamicValue::LIST:
      for (capnp::DynamicValue::Reader element : value.as<capnp::DynamicList>()) {
        ReadValue(element);
      }
      break;
    default:  // scalars, text and data were read by get()
      break;
  }
}

// Reads every field the schema names (and the set member of each union),
// each as the schema's type. totalSize() follows pointers without a schema,
// so a pointer to a list or struct of another kind than its field's (a list
// of structs where the schema has List(Text), a struct where it has Data)
// passes it and throws only when read. Update records are read here in full
// before Check and Apply, so Apply never throws half-way through a record
// that Check accepted (the journal record fuzz target found one).
void ReadEveryField(capnp::DynamicStruct::Reader s) {
  for (capnp::StructSchema::Field field : s.getSchema().getNonUnionFields()) {
    ReadValue(s.get(field));
  }
  KJ_IF_MAYBE (field, s.which()) {
    ReadValue(s.get(*field));
  }
}

// Calls `use` with the validated root of `bytes` read as T. DataLoss when the
// bytes are not exactly one well-formed message.
// `read_all`: read every field as its schema says first (ReadEveryField).
template <typename T>
Status WithRoot(std::string_view bytes, const char* what,
                const std::function<Status(typename T::Reader)>& use, bool read_all = false) {
  if (bytes.empty() || bytes.size() % sizeof(capnp::word) != 0) {
    return DataLossError(std::string(what) + " of " + std::to_string(bytes.size()) +
                         " bytes is not a whole number of words");
  }
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(bytes.size() / sizeof(capnp::word));
  memcpy(words.begin(), bytes.data(), bytes.size());
  capnp::ReaderOptions options;
  // Traversal budget: the validation passes plus Check and Apply reading again.
  options.traversalLimitInWords = words.size() * 8 + 1024;
  options.nestingLimit = kNestingLimit;
  Status result;
  Status decode_error;
  KJ_IF_MAYBE (exception, kj::runCatchingExceptions([&]() {
                 capnp::FlatArrayMessageReader reader(words, options);
                 if (reader.getEnd() != words.end()) {
                   decode_error =
                       DataLossError(std::string(what) + " has trailing bytes after its message");
                   return;
                 }
                 typename T::Reader root = reader.getRoot<T>();
                 root.totalSize();  // touches every pointer once
                 if (read_all) ReadEveryField(capnp::toDynamic(root));
                 result = use(root);
               })) {
    return DataLossError(std::string(what) +
                         " does not decode: " + exception->getDescription().cStr());
  }
  if (!decode_error.ok()) return decode_error;
  return result;
}

}  // namespace

namespace {

// Cap'n Proto's framing written straight into the string that leaves: one
// allocation and one copy of the segments (messageToFlatArray would add an
// array and a second copy).
class StringOutput final : public kj::OutputStream {
 public:
  explicit StringOutput(std::string& out) : out_(out) {}
  void write(const void* buffer, size_t size) override {
    out_.append(static_cast<const char*>(buffer), size);
  }

 private:
  std::string& out_;
};

}  // namespace

std::string EncodeMessage(capnp::MessageBuilder& message) {
  kj::ArrayPtr<const kj::ArrayPtr<const capnp::word>> segments = message.getSegmentsForOutput();
  std::string out;
  out.reserve(capnp::computeSerializedSizeInWords(segments) * sizeof(capnp::word));
  StringOutput stream(out);
  capnp::writeMessage(stream, segments);
  return out;
}

Status ApplyEncodedUpdate(DispatcherState& state, std::string_view bytes, Effects* effects) {
  if (effects != nullptr) effects->Clear();  // also when the bytes are refused
  return WithRoot<journal::Update>(
      bytes, "update", [&](journal::Update::Reader update) { return state.Apply(update, effects); },
      /*read_all=*/true);
}

Status CheckEncodedUpdate(const DispatcherState& state, std::string_view bytes) {
  return WithRoot<journal::Update>(
      bytes, "update", [&](journal::Update::Reader update) { return state.Check(update); },
      /*read_all=*/true);
}

std::string EncodeSnapshot(const DispatcherState& state) {
  capnp::MallocMessageBuilder message;
  state.WriteSnapshot(message.initRoot<journal::StateSnapshot>());
  return EncodeMessage(message);
}

std::string_view SnapshotEncoder::Encode(const DispatcherState& state) {
  size_t used_words = 0;
  size_t total_bytes = 0;
  {
    kj::Maybe<capnp::MallocMessageBuilder> holder;
    capnp::MallocMessageBuilder& message =
        scratch_.size() > 0
            ? holder.emplace(scratch_.asPtr(), capnp::AllocationStrategy::GROW_HEURISTICALLY)
            : holder.emplace();
    state.WriteSnapshot(message.initRoot<journal::StateSnapshot>());
    auto segments = message.getSegmentsForOutput();
    for (auto segment : segments) used_words += segment.size();
    total_bytes = capnp::computeSerializedSizeInWords(segments) * sizeof(capnp::word);
    if (out_.capacity() < total_bytes) out_.reserve(total_bytes + total_bytes / 8);
    out_.resize(total_bytes);
    kj::ArrayOutputStream stream(
        kj::arrayPtr(reinterpret_cast<kj::byte*>(out_.data()), total_bytes));
    capnp::writeMessage(stream, segments);
  }
  // Room for the next one in one segment, with some growth.
  const size_t wanted = used_words + used_words / 8 + 1024;
  if (scratch_.size() < used_words) {
    scratch_ = kj::heapArray<capnp::word>(wanted);
    memset(scratch_.begin(), 0, scratch_.size() * sizeof(capnp::word));
  }
  return std::string_view(out_.data(), total_bytes);
}

Result<DispatcherState> DecodeSnapshot(std::string_view bytes) {
  Result<DispatcherState> out = InternalError("snapshot was not read");
  Status status =
      WithRoot<journal::StateSnapshot>(bytes, "snapshot", [&](journal::StateSnapshot::Reader root) {
        out = DispatcherState::FromSnapshot(root);
        return out.status();
      });
  if (!status.ok()) return status;
  return out;
}

}  // namespace dispatch::state
