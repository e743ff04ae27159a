/* resample.c: placeholder until the family lands. */
#include "lower.h"

const lower_rule_t lower_resample_rules[] = {
    LOWER_END,
};
