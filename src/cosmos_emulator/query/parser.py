"""Recursive-descent parser for the supported subset; anything else is a named 400."""

from __future__ import annotations

from ..errors import bad_request, unsupported
from .ast import (
    ArrayLit,
    Between,
    Binary,
    Call,
    Conditional,
    Expr,
    In,
    Literal,
    Member,
    ObjectLit,
    OrderItem,
    Param,
    Query,
    Ref,
    Selection,
    SelectItem,
    SelectList,
    SelectStar,
    SelectValue,
    Unary,
    children,
)
from .lexer import Token, tokenize
from .values import UNDEFINED

_COMPARISONS = ("=", "!=", "<>", "<", "<=", ">", ">=")
# Cosmos: "maximum length of SQL query: 512 KB".
MAX_QUERY_BYTES = 512 * 1024
# Parentheses, calls, constructors and unary operators nest the parser's recursion (about ten
# Python frames a level): bounded well inside the interpreter's recursion limit.
MAX_NESTING = 40
# The evaluator, validator and planner recurse once or twice per level of the tree.
MAX_EXPRESSION_DEPTH = 128


def parse_query(text: str) -> Query:
    if len(text) > MAX_QUERY_BYTES or len(text.encode("utf-8", "surrogatepass")) > MAX_QUERY_BYTES:
        raise bad_request(
            f"The query text is longer than {MAX_QUERY_BYTES // 1024} KB (the Cosmos limit)."
        )
    query = _Parser(tokenize(text)).query()
    for expr in _expressions(query):
        _check_depth(expr)
    return query


def _expressions(query: Query) -> list[Expr]:
    found: list[Expr] = [o.expr for o in query.order_by]
    select = query.select
    if isinstance(select, SelectValue):
        found.append(select.expr)
    elif isinstance(select, SelectList):
        found.extend(item.expr for item in select.items)
    found.extend(e for e in (query.where, query.top, query.offset, query.limit) if e is not None)
    return found


def _check_depth(root: Expr) -> None:
    """Without recursion: a chain like `c.a.b.c...` or `1-1-1...` is deep but loops to parse."""
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_EXPRESSION_DEPTH:
            raise bad_request(
                f"The query's expressions nest more than {MAX_EXPRESSION_DEPTH} levels deep."
            )
        stack.extend((child, depth + 1) for child in children(node))


def _balanced(op: str, operands: list[Expr]) -> Expr:
    """`a op b op c ...` as a balanced tree: its depth grows with log2 of the chain's length.

    Only for operators that are associative under Cosmos's rules (AND, OR, ||), so long
    generated chains like `c.id = 1 OR c.id = 2 OR ...` stay shallow for the evaluator.
    """
    if len(operands) == 1:
        return operands[0]
    middle = len(operands) // 2
    return Binary(op, _balanced(op, operands[:middle]), _balanced(op, operands[middle:]))


class _Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.i = 0
        self.nesting = 0

    def _enter(self) -> None:
        self.nesting += 1
        if self.nesting > MAX_NESTING:
            raise bad_request(f"The query nests more than {MAX_NESTING} levels deep.")

    # -- token helpers -------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def _is(self, kind: str, value: object = None) -> bool:
        tok = self.tok
        return tok.kind == kind and (value is None or tok.value == value)

    def _kw(self, word: str) -> bool:
        return self._is("KW", word)

    def _punct(self, text: str) -> bool:
        return self._is("PUNCT", text)

    def _advance(self) -> Token:
        tok = self.tok
        self.i += 1
        return tok

    def _expect_kw(self, word: str) -> None:
        if not self._kw(word):
            self._error(f"expected {word}")
        self._advance()

    def _expect_punct(self, text: str) -> None:
        if not self._punct(text):
            self._error(f"expected '{text}'")
        self._advance()

    def _error(self, what: str) -> None:
        near = self.tok.text or "end of query"
        raise bad_request(f"Syntax error, {what} near '{near}' at position {self.tok.pos}.")

    def _refuse_unsupported_keyword(self) -> None:
        if self.tok.kind != "KW":
            return
        names = {
            "JOIN": "JOIN",
            "GROUP": "GROUP BY",
            "EXISTS": "EXISTS subqueries",
            "ARRAY": "ARRAY subqueries",
            "LIKE": "LIKE",
            "HAVING": "HAVING",
        }
        word = str(self.tok.value)
        if word in names:
            raise unsupported(names[word])

    # -- query -----------------------------------------------------------------------------
    def query(self) -> Query:
        self._expect_kw("SELECT")
        distinct = False
        top: Expr | None = None
        if self._kw("DISTINCT"):
            self._advance()
            distinct = True
        if self._kw("TOP"):
            self._advance()
            top = self._count_operand("TOP")
        select = self._selection()
        alias = ""  # no FROM: the selection is evaluated once (Cosmos's `SELECT ABS(-1)`)
        if self._kw("FROM"):
            self._advance()
            alias = self._from_clause()
        elif not (self._is("EOF") or self._kw("WHERE") or self._kw("ORDER") or self._kw("OFFSET")):
            self._error("expected FROM")
        elif isinstance(select, SelectStar):
            raise bad_request("'SELECT *' is not valid if FROM clause is omitted.")
        where: Expr | None = None
        self._refuse_unsupported_keyword()
        if self._kw("WHERE"):
            self._advance()
            where = self.expr()
        self._refuse_unsupported_keyword()
        order_by: list[OrderItem] = []
        if self._kw("ORDER"):
            self._advance()
            self._expect_kw("BY")
            if self._is("IDENT", "RANK") and self.tokens[self.i + 1].kind == "IDENT":
                # Full-text and vector ranking: FullTextScore, RRF, VectorDistance.
                raise unsupported("ORDER BY RANK (FullTextScore, RRF, VectorDistance ranking)")
            while True:
                expr = self.expr()
                descending = False
                if self._kw("ASC") or self._kw("DESC"):
                    descending = self._advance().value == "DESC"
                order_by.append(OrderItem(expr, descending))
                if not self._punct(","):
                    break
                self._advance()
        offset: Expr | None = None
        limit: Expr | None = None
        if self._kw("OFFSET"):
            self._advance()
            offset = self._count_operand("OFFSET")
            self._expect_kw("LIMIT")
            limit = self._count_operand("LIMIT")
        self._refuse_unsupported_keyword()
        if not self._is("EOF"):
            self._error("unexpected token")
        if top is not None and offset is not None:
            raise bad_request("TOP and OFFSET LIMIT cannot be used in the same query.")
        return Query(select, alias, distinct, top, where, tuple(order_by), offset, limit)

    def _count_operand(self, clause: str) -> Expr:
        if self._is("NUM"):
            value = self._advance().value
            if not isinstance(value, int) or value < 0:
                raise bad_request(f"{clause} requires a non-negative integer.")
            return Literal(value)
        if self._is("PARAM"):
            return Param(str(self._advance().value))
        self._error(f"{clause} expects a number or a parameter")
        raise AssertionError  # pragma: no cover

    def _selection(self) -> Selection:
        if self._punct("*"):
            self._advance()
            return SelectStar()
        if self._kw("VALUE"):
            self._advance()
            return SelectValue(self.expr())
        items: list[SelectItem] = []
        while True:
            expr = self.expr()
            alias: str | None = None
            if self._kw("AS"):
                self._advance()
                alias = self._identifier()
            elif self._is("IDENT"):
                alias = self._identifier()
            items.append(SelectItem(expr, alias))
            if not self._punct(","):
                break
            self._advance()
        return SelectList(tuple(items))

    def _identifier(self) -> str:
        if not self._is("IDENT"):
            self._error("expected an identifier")
        return self._advance().text

    def _from_clause(self) -> str:
        if self._punct("("):
            raise unsupported("subqueries in FROM")
        name = self._identifier()
        if self._kw("IN"):
            raise unsupported("FROM ... IN iteration")
        if self._punct(".") or self._punct("["):
            raise unsupported("FROM on a sub-path")
        alias = name
        if self._kw("AS"):
            self._advance()
            alias = self._identifier()
        elif self._is("IDENT"):
            alias = self._identifier()
        if self._kw("IN"):
            raise unsupported("FROM ... IN iteration")
        return alias

    # -- expressions ---------------------------------------------------------------------
    def expr(self) -> Expr:
        """The lowest precedence: `a ? b : c` (right-associative), then `a ?? b`."""
        self._enter()
        if self._punct("?") or self._punct("??"):
            self._error("unexpected operator")
        left = self._coalesce()
        if self._punct("?"):
            self._advance()
            then = self.expr()
            self._expect_punct(":")
            left = Conditional(left, then, self.expr())
        self.nesting -= 1
        return left

    def _coalesce(self) -> Expr:
        # `??` is left-associative; its chains are rare and short, so no balancing is needed
        # beyond the depth check every expression gets.
        left = self._or()
        while self._punct("??"):
            self._advance()
            left = Binary("??", left, self._or())
        return left

    def _or(self) -> Expr:
        operands = [self._and()]
        while self._kw("OR"):
            self._advance()
            operands.append(self._and())
        return _balanced("OR", operands)

    def _and(self) -> Expr:
        operands = [self._not()]
        while self._kw("AND"):
            self._advance()
            operands.append(self._not())
        return _balanced("AND", operands)

    def _not(self) -> Expr:
        if self._kw("NOT"):
            self._advance()
            self._enter()
            operand = self._not()
            self.nesting -= 1
            return Unary("NOT", operand)
        return self._comparison()

    def _comparison(self) -> Expr:
        left = self._additive()
        while True:
            if self.tok.kind == "PUNCT" and self.tok.value in _COMPARISONS:
                op = str(self._advance().value)
                left = Binary("!=" if op == "<>" else op, left, self._additive())
                continue
            negated = False
            if self._kw("NOT") and self.tokens[self.i + 1].value in ("IN", "BETWEEN", "LIKE"):
                self._advance()
                negated = True
            if self._kw("IN"):
                self._advance()
                self._expect_punct("(")
                items = [self.expr()]
                while self._punct(","):
                    self._advance()
                    items.append(self.expr())
                self._expect_punct(")")
                left = In(left, tuple(items), negated)
                continue
            if self._kw("BETWEEN"):
                self._advance()
                low = self._additive()
                self._expect_kw("AND")
                high = self._additive()
                left = Between(left, low, high, negated)
                continue
            self._refuse_unsupported_keyword()
            return left

    def _additive(self) -> Expr:
        left = self._concatenation()
        while self.tok.kind == "PUNCT" and self.tok.value in ("+", "-"):
            op = str(self._advance().value)
            left = Binary(op, left, self._concatenation())
        return left

    def _concatenation(self) -> Expr:
        operands = [self._multiplicative()]
        while self._punct("||"):
            self._advance()
            operands.append(self._multiplicative())
        return _balanced("||", operands)

    def _multiplicative(self) -> Expr:
        left = self._unary()
        while self.tok.kind == "PUNCT" and self.tok.value in ("*", "/", "%"):
            op = str(self._advance().value)
            left = Binary(op, left, self._unary())
        return left

    def _unary(self) -> Expr:
        if self._punct("-") or self._punct("+"):
            negate = self._advance().value == "-"
            self._enter()
            operand = self._unary()
            self.nesting -= 1
            if not negate:
                return operand
            if isinstance(operand, Literal) and isinstance(operand.value, int | float):
                return Literal(-operand.value)
            return Unary("-", operand)
        return self._postfix(self._primary())

    def _postfix(self, expr: Expr) -> Expr:
        while True:
            if self._punct("."):
                self._advance()
                if self.tok.kind not in ("IDENT", "KW"):
                    self._error("expected a property name")
                expr = Member(expr, self._advance().text)
            elif self._punct("["):
                self._advance()
                if self._is("STR"):
                    key: str | int = str(self._advance().value)
                elif self._is("NUM") and isinstance(self.tok.value, int):
                    key = int(self.tok.value)
                    self._advance()
                else:
                    raise unsupported("dynamic property access like c[@p] (only literal keys)")
                self._expect_punct("]")
                expr = Member(expr, key)
            else:
                return expr

    def _primary(self) -> Expr:
        tok = self.tok
        if tok.kind == "NUM" or tok.kind == "STR":
            self._advance()
            return Literal(tok.value)
        if tok.kind == "PARAM":
            self._advance()
            return Param(str(tok.value))
        if tok.kind == "KW":
            constants = {"TRUE": True, "FALSE": False, "NULL": None, "UNDEFINED": UNDEFINED}
            if tok.value in constants:
                self._advance()
                return Literal(constants[str(tok.value)])
            self._refuse_unsupported_keyword()
            self._error("unexpected keyword")
        if tok.kind == "IDENT":
            self._advance()
            if tok.text.lower() == "udf" and self._punct("."):
                raise unsupported("user-defined functions (udf.*)")
            if self._punct("("):
                return self._call(tok.text)
            return Ref(tok.text)
        if self._punct("("):
            self._advance()
            if self._kw("SELECT"):
                raise unsupported("subqueries")
            inner = self.expr()
            self._expect_punct(")")
            return inner
        if self._punct("["):
            self._advance()
            items: list[Expr] = []
            if not self._punct("]"):
                items.append(self.expr())
                while self._punct(","):
                    self._advance()
                    items.append(self.expr())
            self._expect_punct("]")
            return ArrayLit(tuple(items))
        if self._punct("{"):
            self._advance()
            pairs: list[tuple[str, Expr]] = []
            if not self._punct("}"):
                while True:
                    key = str(self._advance().value) if self._is("STR") else self._identifier()
                    self._expect_punct(":")
                    pairs.append((key, self.expr()))
                    if not self._punct(","):
                        break
                    self._advance()
            self._expect_punct("}")
            return ObjectLit(tuple(pairs))
        self._error("unexpected token")
        raise AssertionError  # pragma: no cover

    def _call(self, name: str) -> Expr:
        self._expect_punct("(")
        upper = name.upper()
        if upper in ("UDF",) or name.lower().startswith("udf."):
            raise unsupported("user-defined functions")
        args: list[Expr] = []
        if not self._punct(")"):
            if self._kw("SELECT"):
                raise unsupported("subqueries")
            args.append(self.expr())
            while self._punct(","):
                self._advance()
                args.append(self.expr())
        self._expect_punct(")")
        return Call(upper, tuple(args))
