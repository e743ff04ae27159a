/* attention.c: placeholder until the family lands. */
#include "lower.h"

const lower_rule_t lower_attention_rules[] = {
    LOWER_END,
};
