/* backward.c: placeholder until the family lands. */
#include "lower.h"

const lower_rule_t lower_backward_rules[] = {
    LOWER_END,
};
