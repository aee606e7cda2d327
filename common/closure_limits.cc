#include "common/closure_limits.h"

namespace dispatch {

std::string BoundedErrorText(std::string_view text) {
  if (text.size() <= kMaxClosureErrorTextBytes) return std::string(text);
  return std::string(text.substr(0, kMaxClosureErrorTextBytes)) + "... (" +
         std::to_string(text.size() - kMaxClosureErrorTextBytes) + " more bytes cut)";
}

std::string ResultOverLimitError(uint64_t closure_id, uint64_t size, uint64_t limit) {
  return "the result of closure " + std::to_string(closure_id) + " is " + std::to_string(size) +
         " bytes, over the dispatcher's limit of " + std::to_string(limit) +
         " bytes (--max-result-bytes); not retried: it would be as large again";
}

}  // namespace dispatch
