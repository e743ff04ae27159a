/* indexing.c: placeholder until the family lands. */
#include "lower.h"

const lower_rule_t lower_indexing_rules[] = {
    LOWER_END,
};
