#include "check_labels.hpp"

#include <string>

#include "kfuse/error.hpp"

namespace kfuse::detail {

void check_class_labels(const std::vector<Num>& labels, int64_t classes, int64_t ignore_index) {
  for (size_t i = 0; i < labels.size(); ++i) {
    int64_t v = labels[i].i;
    if ((v >= 0 && v < classes) || v == ignore_index) continue;
    throw UserError("cross_entropy: label " + std::to_string(v) + " at index " + std::to_string(i) +
                    " is out of range for " + std::to_string(classes) + " classes; labels must be in [0, " +
                    std::to_string(classes) + ") or equal ignore_index (" + std::to_string(ignore_index) + ")");
  }
}

}  // namespace kfuse::detail
