// cross_entropy's label check. Labels are data: the check runs at record time when the labels
// are already computed (composites.cpp), else when the graph is evaluated, as the host step of
// a CheckLabels node placed before the kernel that reads them (so no kernel ever indexes with an
// unchecked label).
#pragma once
#include <vector>

#include "exact_value.hpp"

namespace kfuse::detail {

/// Throws UserError naming cross_entropy, the first label that is neither in [0, classes) nor
/// ignore_index, its index and the class count. `labels` are integers (exact_value.hpp).
void check_class_labels(const std::vector<Num>& labels, int64_t classes, int64_t ignore_index);

}  // namespace kfuse::detail
