#pragma once
// Internals of the environment -> options module (env.cpp), exposed for tests.

#include <string>
#include <string_view>
#include <vector>

namespace dtrain::detail {

/// Expands a Slurm host list (SLURM_JOB_NODELIST) into host names, in order:
/// "node[01-03,7],gpu5" -> node01 node02 node03 node7 gpu5. A range keeps the
/// width of its lower bound ("[08-10]" -> 08 09 10); several bracket groups
/// in one name expand as a product ("r[1-2]n[1-2]" -> r1n1 r1n2 r2n1 r2n2).
/// Throws InvalidArgument ("'<list>' is not a Slurm host list: <why>") on
/// unbalanced brackets, empty names, non-numeric or descending ranges.
std::vector<std::string> expand_nodelist(std::string_view list);

/// Expands SLURM_TASKS_PER_NODE ("2(x3),1" -> 2 2 2 1): one task count per
/// node of the step. Throws InvalidArgument on anything else.
std::vector<int> expand_tasks_per_node(std::string_view spec);

}  // namespace dtrain::detail
